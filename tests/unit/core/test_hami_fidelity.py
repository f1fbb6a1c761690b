"""The rules of issue 16 as table tests, each case naming the upstream test or code it ports.

Sources (facts only): HAMi `pkg/device/nvidia/device.go` (GenerateResourceRequests, checkGPUtype,
CheckUUID) and `device_test.go`; HAMi `pkg/scheduler/webhook.go` (Handle, isPrivilegedContainer)
and `webhook_test.go`; KAI `gpu_request_validator.go` and `gpu_request_validator_test.go`.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from vgpu_bridge.core import InvalidRequest, TranslationContext, TranslatorConfig, translate
from vgpu_bridge.core.dialects import dialects_for
from vgpu_bridge.core.models import GpuRequest, Problems
from vgpu_bridge.core.normalise import normalise
from vgpu_bridge.core.requests import shares
from vgpu_bridge.core.workloads import pod_templates

WHOLE = (None, Decimal(100), 100)  # (memory MiB, memory percent, cores) of a whole card


def pod(
    *containers: dict[str, Any],
    annotations: dict[str, str] | None = None,
    init: tuple[dict[str, Any], ...] = (),
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if annotations is not None:
        meta["annotations"] = annotations
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init:
        body["initContainers"] = list(init)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def gpu(limits: dict[str, Any], name: str = "main") -> dict[str, Any]:
    return {"name": name, "image": "cuda", "resources": {"limits": limits}}


def plain(name: str, **security: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "busybox"}
    if security:
        body["securityContext"] = security
    return body


def requests_of(obj: dict[str, Any], config: TranslatorConfig) -> list[GpuRequest]:
    """Each share of the pod after HAMi's defaults; fails the test on any problem."""
    problems, warnings = Problems(), list[str]()
    (template,) = pod_templates(obj)
    found = [
        normalise(s.raw, config=config, problems=problems, warnings=warnings)
        for s in shares(template, problems, dialects_for(config))
    ]
    assert not problems, problems.errors
    return [r for r in found if r is not None]


def refusal(obj: dict[str, Any], config: TranslatorConfig | None = None) -> list[str]:
    context = TranslationContext(config=config or TranslatorConfig())
    with pytest.raises(InvalidRequest) as caught:
        translate(obj, context=context)
    return caught.value.lines()


def admitted(obj: dict[str, Any], config: TranslatorConfig | None = None) -> tuple[str, ...]:
    """The plan's warnings: translation succeeded."""
    context = TranslationContext(config=config or TranslatorConfig())
    return translate(obj, context=context).warnings


def shape(request: GpuRequest) -> tuple[int | None, Decimal | None, int]:
    return request.memory_mib, request.memory_percent, request.cores


# --- item 3: 0 means "not given" -------------------------------------------------------------
# device.go GenerateResourceRequests: gpumem 0 and no percentage fall back to defaultMemory, else
# 100%; the scheduler's Fit treats a percentage <= 0 as unset; device_test.go
# Test_GenerateResourceRequests covers gpumem with and without a percentage.
ZERO_CASES = [
    pytest.param({"nvidia.com/gpumem": 0}, WHOLE, id="gpumem-0-is-whole-card"),
    pytest.param({"nvidia.com/gpumem-percentage": 0}, WHOLE, id="percentage-0-is-whole-card"),
    pytest.param(
        {"nvidia.com/gpumem": 0, "nvidia.com/gpumem-percentage": 0}, WHOLE, id="both-0-whole"
    ),
    pytest.param(
        {"nvidia.com/gpumem": 3000, "nvidia.com/gpumem-percentage": 0},
        (3000, None, 0),
        id="gpumem-wins-over-percentage-0",
    ),
    pytest.param(
        {"nvidia.com/gpumem": 0, "nvidia.com/gpumem-percentage": 40},
        (None, Decimal(40), 0),
        id="percentage-wins-over-gpumem-0",
    ),
    pytest.param(
        {"nvidia.com/gpumem": 0, "nvidia.com/gpucores": 30},
        (None, Decimal(100), 30),
        id="gpumem-0-with-cores-keeps-whole-memory",
    ),
    pytest.param(
        {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 0}, WHOLE, id="volcano-memory-0"
    ),
    pytest.param(
        {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory-percentage": 0},
        WHOLE,
        id="volcano-percentage-0",
    ),
]


@pytest.mark.parametrize(("limits", "expected"), ZERO_CASES)
def test_zero_memory_or_percentage_is_not_given(limits: dict[str, Any], expected: Any) -> None:
    (request,) = requests_of(pod(gpu(limits)), TranslatorConfig())
    assert shape(request) == expected


def test_gpumem_0_takes_the_default_memory_when_one_is_set() -> None:
    config = TranslatorConfig(default_memory=4096)
    (request,) = requests_of(pod(gpu({"nvidia.com/gpumem": 0})), config)
    assert shape(request) == (4096, None, 0)


def test_gpumem_0_without_a_count_still_asks_for_one_card() -> None:
    # device.go mutateContainerResource: a gpumem key without a count gets defaultGPUNum
    (request,) = requests_of(pod(gpu({"nvidia.com/gpumem": "0"})), TranslatorConfig())
    assert request.count == 1


# --- item 1: gpumem is MiB ------------------------------------------------------------------
# device.go GenerateResourceRequests keeps gpumem in an int32 after memoryFactor; a byte count or
# a unit overflows it and HAMi drops the request. We refuse with the number to write.
@pytest.mark.parametrize(
    ("value", "factor", "hint"),
    [
        pytest.param("16Gi", 1, "gpumem is MiB: write 16384", id="binary-unit"),
        pytest.param("16.0Gi", 1, "gpumem is MiB: write 16384", id="decimal-binary-unit"),
        pytest.param("17179869184", 1, "gpumem is MiB: write 16384", id="bytes"),
        pytest.param(17179869184, 1, "gpumem is MiB: write 16384", id="bytes-as-yaml-int"),
        pytest.param("1Gi", 2, "gpumem is in units of 2 MiB: write 512", id="unit-with-factor"),
        pytest.param("16G", 1, "gpumem is MiB", id="decimal-unit-no-exact-hint"),
    ],
)
def test_gpumem_with_a_unit_or_in_bytes_is_refused_with_a_hint(
    value: object, factor: int, hint: str
) -> None:
    (line,) = refusal(
        pod(gpu({"nvidia.com/gpumem": value})), TranslatorConfig(memory_factor=factor)
    )
    assert "spec.containers[0].resources.limits[nvidia.com/gpumem]: " in line
    assert hint in line


@pytest.mark.parametrize(("value", "hint"), [("1Gi", "write 1024"), ("17179869184", "write 16384")])
def test_kai_gpu_memory_with_a_unit_or_in_bytes_is_refused(value: str, hint: str) -> None:
    # KAI gpu_request_validator.go validateMemoryAnnotation: an integer of MiB, no suffix
    (line,) = refusal(pod(gpu({}), annotations={"gpu-memory": value}))
    assert "metadata.annotations[gpu-memory]: " in line
    assert f"gpu-memory is MiB: {hint}" in line


def test_gpumem_beyond_an_int32_after_the_factor_is_refused() -> None:
    config = TranslatorConfig(memory_factor=2)
    (line,) = refusal(pod(gpu({"nvidia.com/gpumem": 2**30})), config)
    assert "times the memory factor 2 is 2147483648 MiB" in line
    (request,) = requests_of(pod(gpu({"nvidia.com/gpumem": 2**30 - 1})), config)
    assert request.memory_mib == 2**31 - 2


def test_a_plain_gpumem_up_to_the_int32_limit_is_mib() -> None:
    (request,) = requests_of(pod(gpu({"nvidia.com/gpumem": "16384.0"})), TranslatorConfig())
    assert request.memory_mib == 16384


@pytest.mark.parametrize(
    ("value", "mib"),
    [("3k", 3000), ("1k", 1000), ("3e3", 3000), ("1.5k", 1500), ("2M", 2_000_000)],
    ids=["3k", "1k", "3e3", "1.5k", "2M"],
)
def test_the_api_servers_short_form_of_a_plain_gpumem_is_mib(value: str, mib: int) -> None:
    # the API server stores `gpumem: 3000` as "3k" before the webhook sees it
    (request,) = requests_of(pod(gpu({"nvidia.com/gpumem": value})), TranslatorConfig())
    assert request.memory_mib == mib


@pytest.mark.parametrize("value", ["1500m", "3Ki", "2Mi"])
def test_gpumem_in_fractions_or_binary_units_is_refused(value: str) -> None:
    (line,) = refusal(pod(gpu({"nvidia.com/gpumem": value})))
    assert f"got '{value}' (with a unit)" in line


# --- item 5: spec.nodeName ------------------------------------------------------------------
def test_gpu_pod_with_node_name_is_refused() -> None:
    # webhook.go Handle: "pod has node assigned"; webhook_test.go TestPodHasNodeName
    (line,) = refusal(pod(gpu({"nvidia.com/gpu": 1}), nodeName="n1"))
    assert "spec.nodeName: is set, so no scheduler places this pod" in line


def test_pod_without_gpu_keeps_its_node_name() -> None:
    # webhook_test.go TestNonGPUPodAllowedAdmission: a pod with no GPU is none of our business
    assert admitted(pod(plain("cpu-only"), nodeName="n1")) == ()


# --- item 8: privileged containers ----------------------------------------------------------
# webhook.go isPrivilegedContainer: securityContext.privileged true, any container of the pod;
# webhook_test.go TestPrivilegedContainerDenied.
@pytest.mark.parametrize(
    ("obj", "path"),
    [
        pytest.param(
            pod(plain("sidecar", privileged=True), gpu({"hami.io/gpu": 1})),
            "spec.containers[0].securityContext.privileged",
            id="privileged sidecar with gpu workload",
        ),
        pytest.param(
            pod(gpu({"hami.io/gpu": 1}), init=(plain("init", privileged=True),)),
            "spec.initContainers[0].securityContext.privileged",
            id="privileged init container with gpu workload",
        ),
    ],
)
def test_a_privileged_container_beside_a_gpu_is_refused(obj: dict[str, Any], path: str) -> None:
    config = TranslatorConfig(resource_count_name="hami.io/gpu")
    (line,) = refusal(obj, config)
    assert f"{path}: is true in a pod that asks for a GPU share" in line
    assert admitted(obj, replace(config, allow_privileged=True)) == ()


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(pod(plain("privileged", privileged=True)), id="privileged without gpu"),
        pytest.param(
            pod({**gpu({"nvidia.com/gpu": 1}), "securityContext": {"privileged": False}}),
            id="privileged false",
        ),
        pytest.param(
            pod({**gpu({"nvidia.com/gpu": 1}), "securityContext": {"privileged": "true"}}),
            id="privileged as a string is not true (the API server refuses it anyway)",
        ),
    ],
)
def test_pods_hami_admits_despite_a_security_context(obj: dict[str, Any]) -> None:
    admitted(obj)


# --- item 6: blank device choice ------------------------------------------------------------
# device.go checkGPUtype / CheckUUID: an empty item matches nothing to exclude; legacy HAMi
# trims and skips empty items, so a blank list is no constraint. Volcano's uuid annotations alike.
@pytest.mark.parametrize(
    "key",
    [
        "nvidia.com/use-gputype",
        "nvidia.com/nouse-gputype",
        "nvidia.com/use-gpuuuid",
        "nvidia.com/nouse-gpuuuid",
        "volcano.sh/vgpu-use-gpuuuid",
        "volcano.sh/vgpu-nouse-gpuuuid",
    ],
)
@pytest.mark.parametrize("value", ["", "   ", ",", " , ,"])
def test_a_blank_device_choice_is_no_constraint_with_a_warning(key: str, value: str) -> None:
    warnings = admitted(pod(gpu({"nvidia.com/gpumem": 1024}), annotations={key: value}))
    assert any(f"annotations[{key}] names no GPU" in w for w in warnings)


def test_quotes_in_a_device_choice_are_still_refused() -> None:
    obj = pod(gpu({"nvidia.com/gpu": 1}), annotations={"nvidia.com/use-gputype": 'A100"'})
    (line,) = refusal(obj)
    assert "may only contain" in line


# --- item 7: KAI's own validation -----------------------------------------------------------
# gpu_request_validator.go; gpu_request_validator_test.go "block MPS without GPU request",
# "forbid GPU annotation and GPU request mismatch (fractional)".
def test_kai_mps_beside_a_whole_gpu_is_refused() -> None:
    obj = pod(gpu({"nvidia.com/gpu": 1}), annotations={"mps": "true"})
    (line,) = refusal(obj)
    assert "metadata.annotations[mps]: is only valid beside gpu-fraction or gpu-memory" in line


# a fraction of 1 needs no card sizes (a share below 1 would need an inventory, beside the point)
@pytest.mark.parametrize("annotation", [{"gpu-fraction": "1"}, {"gpu-memory": "2048"}])
def test_kai_mps_beside_a_fraction_or_gpu_memory_is_admitted(annotation: dict[str, str]) -> None:
    admitted(pod(gpu({}), annotations={"mps": "true", **annotation}), None)


@pytest.mark.parametrize("annotation", [{"gpu-fraction": "0.5"}, {"gpu-memory": "2048"}])
def test_kai_fraction_with_a_whole_gpu_elsewhere_in_the_pod_is_refused(
    annotation: dict[str, str],
) -> None:
    obj = pod(plain("main"), gpu({"nvidia.com/gpu": 1}, "other"), annotations=annotation)
    lines = refusal(obj)
    assert any(
        "spec.containers[1].resources.limits[nvidia.com/gpu]: cannot be combined" in line
        for line in lines
    ), lines


# --- item 8: renamed resources --------------------------------------------------------------
# webhook_test.go runs HAMi under hami.io/gpu, hami.io/gpumem, hami.io/gpumem-percentage,
# hami.io/gpucores (TestPodHasNodeName, TestPrivilegedContainerDenied).
RENAMED = TranslatorConfig(
    resource_count_name="hami.io/gpu",
    resource_memory_name="hami.io/gpumem",
    resource_memory_percentage_name="hami.io/gpumem-percentage",
    resource_core_name="hami.io/gpucores",
    resource_priority_name="hami.io/priority",
)


def test_renamed_resources_are_read_and_the_default_names_are_not() -> None:
    limits = {"hami.io/gpu": 2, "hami.io/gpumem": 3000, "hami.io/gpucores": 30}
    (request,) = requests_of(pod(gpu({**limits, "hami.io/priority": 1})), RENAMED)
    assert (request.count, *shape(request), request.priority) == (2, 3000, None, 30, 1)
    assert requests_of(pod(gpu({"nvidia.com/gpu": 1})), RENAMED) == []


def test_a_renamed_gpumem_with_a_unit_names_its_own_field() -> None:
    (line,) = refusal(pod(gpu({"hami.io/gpumem": "2Gi"})), RENAMED)
    assert "limits[hami.io/gpumem]: " in line
    assert "gpumem is MiB: write 2048" in line


def test_resource_names_must_differ_and_look_like_extended_resources() -> None:
    with pytest.raises(ValueError, match="must differ"):
        TranslatorConfig(resource_memory_name="nvidia.com/gpu")
    with pytest.raises(ValueError, match="pattern"):
        TranslatorConfig(resource_count_name="gpu")


# --- item 8: gpu-scheduler-policy mutex -----------------------------------------------------
# HAMi pkg/scheduler/policy/gpu_policy.go: mutex places a pod only on idle GPUs.
@pytest.mark.parametrize("policy", ["mutex", "binpack, mutex", " MUTEX "])
def test_mutex_books_each_card_whole(policy: str) -> None:
    limits = {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}
    obj = pod(gpu(limits), annotations={"hami.io/gpu-scheduler-policy": policy})
    context = TranslationContext()
    plan = translate(obj, context=context)
    whole = translate(pod(gpu({"nvidia.com/gpu": 2})), context=context)
    assert [t["spec"] for t in plan.templates] == [t["spec"] for t in whole.templates]
    assert any("each GPU is booked whole" in w for w in plan.warnings)


def test_other_policies_stay_hints() -> None:
    obj = pod(
        gpu({"nvidia.com/gpumem": 3000}), annotations={"hami.io/gpu-scheduler-policy": "spread"}
    )
    (warning,) = admitted(obj)
    assert "is not acted on" in warning
