"""Properties of translate over generated pods: deterministic, idempotent, leaves nothing of ours
behind, never touches a pod without a GPU request, and refuses garbage without crashing."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_bridge.core import InvalidRequest, Inventory, Plan, TranslationContext, translate
from vgpu_bridge.core.dialects import TRANSLATED_ANNOTATIONS, TRANSLATED_RESOURCES, hami, volcano

CONTEXT = TranslationContext(inventory=Inventory({"gpu.vgpu-bridge.io": frozenset({2**34, 2**35})}))
OTHER_RESOURCES = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/mig-1g.10gb", "example.com/nic"]),
    st.sampled_from(["1", "2Gi", "500m"]),
    max_size=3,
)
ANNOTATIONS = st.dictionaries(
    st.sampled_from(
        [
            "nvidia.com/use-gputype",
            "nvidia.com/nouse-gputype",
            "nvidia.com/use-gpuuuid",
            "nvidia.com/nouse-gpuuuid",
            "hami.io/gpu-scheduler-policy",
            "team",
        ]
    ),
    st.sampled_from(["A100", "h100,L4", "GPU-1,GPU-2", "binpack"]),
    max_size=3,
).filter(  # a GPU both chosen and avoided is refused (test_hostile_manifests)
    lambda notes: all(
        notes.get(f"nvidia.com/use-{kind}") is None
        or notes.get(f"nvidia.com/use-{kind}") != notes.get(f"nvidia.com/nouse-{kind}")
        for kind in ("gputype", "gpuuuid")
    )
)


@st.composite
def gpu_resources(draw: st.DrawFn) -> dict[str, Any]:
    """A valid share in HAMi or Volcano names (count ≥ 1 when given)."""
    names = draw(st.sampled_from([hami.RESOURCES, volcano.RESOURCES]))
    chosen: dict[str, Any] = {}
    if draw(st.booleans()):
        chosen[names.count] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        chosen[names.memory] = draw(st.integers(1, 80_000))
    if draw(st.booleans()):
        chosen[names.memory_percentage] = draw(st.integers(1, 100))
    if draw(st.booleans()):
        chosen[names.cores] = draw(st.integers(0, 100))
    if names.priority and draw(st.booleans()):
        chosen[names.priority] = draw(st.integers(0, 1))
    return chosen or {names.count: 1}


def _container(index: int, gpu: dict[str, Any] | None, other: dict[str, Any]) -> dict[str, Any]:
    limits = {**other, **(gpu or {})}
    return {"name": f"c{index}", "image": "cuda", "resources": {"limits": limits}}


@st.composite
def pods(draw: st.DrawFn, *, with_gpu: bool) -> dict[str, Any]:
    count = draw(st.integers(1, 3))
    containers = []
    for i in range(count):
        gpu = draw(gpu_resources()) if with_gpu and (i == 0 or draw(st.booleans())) else None
        containers.append(_container(i, gpu, draw(OTHER_RESOURCES)))
    init = [_container(9, draw(gpu_resources()), {})] if with_gpu and draw(st.booleans()) else []
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    metadata = {"name": "p", "namespace": "ns", "annotations": draw(ANNOTATIONS)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _plan(pod: dict[str, Any]) -> Plan:
    return translate(pod, context=CONTEXT)


@given(pods(with_gpu=True))
def test_translation_is_deterministic(pod: dict[str, Any]) -> None:
    assert _plan(pod) == _plan(pod)


@given(pods(with_gpu=True))
def test_translating_the_result_again_changes_nothing(pod: dict[str, Any]) -> None:
    translated = _plan(pod).apply_to(pod)
    again = _plan(translated)
    assert again.patch == ()
    assert again.templates == ()


@given(pods(with_gpu=True))
def test_no_translated_resource_or_annotation_is_left_behind(pod: dict[str, Any]) -> None:
    plan = _plan(pod)
    translated = plan.apply_to(pod)
    spec = translated["spec"]
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        resources = container.get("resources", {})
        for section in ("limits", "requests"):
            assert not TRANSLATED_RESOURCES & set(resources.get(section, {}))
    assert not TRANSLATED_ANNOTATIONS & set(translated["metadata"].get("annotations", {}))
    templates = {t["metadata"]["name"] for t in plan.templates}
    pod_claims = {c["name"]: c["resourceClaimTemplateName"] for c in spec["resourceClaims"]}
    assert set(pod_claims.values()) == templates
    for before, after in zip(pod["spec"]["containers"], spec["containers"], strict=True):
        asked = TRANSLATED_RESOURCES & set(before["resources"]["limits"])
        claims = [c["name"] for c in after["resources"].get("claims", [])]
        assert len(claims) == (1 if asked else 0)
        assert set(claims) <= set(pod_claims)


@given(pods(with_gpu=False))
def test_a_pod_without_a_gpu_request_is_never_touched(pod: dict[str, Any]) -> None:
    plan = _plan(pod)
    assert plan.patch == ()
    assert plan.templates == ()
    assert plan.warnings == ()


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 500),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=300)
@given(
    st.dictionaries(st.sampled_from(sorted(TRANSLATED_RESOURCES)), JUNK, min_size=1, max_size=4),
    st.dictionaries(st.sampled_from(sorted(TRANSLATED_ANNOTATIONS)), JUNK, max_size=3),
)
def test_garbage_is_refused_with_field_paths_never_a_crash(
    limits: dict[str, Any], annotations: dict[str, Any]
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "junk", "annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }
    try:
        _plan(pod)
    except InvalidRequest as exc:
        lines = exc.lines()
    else:
        return
    assert lines
    for line in lines:
        assert line.startswith("Pod/junk: ")
        assert line.count(": ") >= 2
