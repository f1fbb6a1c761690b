"""Careless and hostile manifests: wrong types, deep nesting, alias bombs, contradictions.

Each is refused with `<object>: <field>: <reason>` (exit 1), never a traceback.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_runner import run_cli
from vgpu_bridge.adapters import AdapterRegistry, default_registry
from vgpu_bridge.core import (
    DEFAULT,
    FieldError,
    InvalidRequest,
    Inventory,
    TranslationContext,
    TranslatorConfig,
)
from vgpu_bridge.manifests import MAX_ALIAS_NODES, MAX_DEPTH, ManifestError, load_objects

INVENTORY = Inventory({"gpu.vgpu-bridge.io": frozenset({40 * 2**30, 80 * 2**30})})
CONTEXT = TranslationContext(config=TranslatorConfig(), profile=DEFAULT, inventory=INVENTORY)


def gpu_pod(annotations: dict[str, Any] | None = None, **resources: Any) -> dict[str, Any]:
    resources = resources or {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}}
    container = {"name": "main", "image": "cuda", "resources": resources}
    meta: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container]},
    }


def translate_text(text: str, *args: str) -> tuple[int, str, str]:
    result = run_cli(["translate", "-f", "-", *args], stdin=text)
    assert "Traceback" not in result.stderr
    return result.code, result.stdout, result.stderr


# --- wrong types -----------------------------------------------------------------------------

WRONG_TYPES = [
    ("containers", {"spec": {"containers": 5}}, "spec.containers: must be a list, got int"),
    (
        "volcano-spec",
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "spec": "x"},
        "spec: must be a map, got str",
    ),
    (
        "resources",
        {"spec": {"containers": [{"name": "a", "resources": [1]}]}},
        "spec.containers[0].resources: must be a map, got list",
    ),
    (
        "quantity",
        {"spec": {"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": [1]}}}]}},
        "spec.containers[0].resources.limits[nvidia.com/gpu]: must be a whole number",
    ),
    ("metadata", {"metadata": "x"}, "metadata: must be a map, got str"),
    (
        "deployment-template",
        {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": 3}},
        "spec.template: must be a map, got int",
    ),
]


@pytest.mark.parametrize(
    ("patch", "line"), [w[1:] for w in WRONG_TYPES], ids=[w[0] for w in WRONG_TYPES]
)
def test_a_wrong_type_is_refused_naming_the_field(patch: dict[str, Any], line: str) -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, **patch}
    code, _, stderr = translate_text(json.dumps(obj))
    assert code == 1
    assert line in stderr


JUNK: list[Any] = [5, "x", [1], {"a": 1}, None, True, 1.5, [{"a": [1]}]]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


def _replaced(obj: Any, path: tuple[Any, ...], junk: Any) -> Any:
    result = copy.deepcopy(obj)
    parent = result
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = junk
    return result


def _workloads() -> list[dict[str, Any]]:
    pod = gpu_pod({"nvidia.com/use-gputype": "A100", "gpu-fraction": "0.5"})
    pod["spec"]["resourceClaims"] = [{"name": "x", "resourceClaimName": "y"}]
    pod["spec"]["initContainers"] = copy.deepcopy(pod["spec"]["containers"])
    pod["metadata"]["labels"] = {"kai.scheduler/queue": "q"}
    template = {k: v for k, v in pod.items() if k in ("metadata", "spec")}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": template}}
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"tasks": [{"name": "t", "template": template}]},
    }
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "spec": {"minResources": {"nvidia.com/gpu": 1}},
    }
    return [pod, deployment, job, podgroup]


@pytest.mark.parametrize("obj", _workloads(), ids=["pod", "deployment", "volcano-job", "podgroup"])
def test_junk_anywhere_in_a_workload_is_translated_or_refused_never_a_crash(
    obj: dict[str, Any],
) -> None:
    registry = default_registry()
    for path in list(_paths(obj))[1:]:
        for junk in JUNK:
            errors = _translate_or_refuse(registry, _replaced(obj, path, junk))
            assert all(e.path and e.reason for e in errors), (path, junk, errors)


def _translate_or_refuse(registry: AdapterRegistry, obj: dict[str, Any]) -> tuple[FieldError, ...]:
    """() when `obj` translates (and the plan applies), else the fields its refusal names."""
    try:
        registry.pick(obj).translate(obj, context=CONTEXT).apply_to(obj)
    except InvalidRequest as exc:
        return exc.errors
    return ()


# --- nesting and aliases ---------------------------------------------------------------------


def _deep_yaml(depth: int) -> str:
    return "apiVersion: v1\nkind: ConfigMap\ndata: " + "[" * depth + "]" * depth + "\n"


def _deep_json(depth: int) -> str:
    return '{"apiVersion": "v1", "kind": "ConfigMap", "data": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("depth", [MAX_DEPTH, 470, 999, 100_000])
@pytest.mark.parametrize("deep", [_deep_yaml, _deep_json], ids=["yaml", "json"])
@pytest.mark.parametrize("output", ["yaml", "json"])
def test_nesting_deeper_than_the_bound_is_refused_before_it_is_built(
    deep: Any, depth: int, output: str
) -> None:
    code, _, stderr = translate_text(deep(depth), "-o", output)
    assert code == 1
    # libyaml's own bound (1000 levels) may speak first: it scans far ahead in flow collections
    assert f"nests deeper than {MAX_DEPTH} levels" in stderr or "maximum nesting depth" in stderr


def test_nesting_up_to_the_bound_is_read() -> None:
    code, stdout, _ = translate_text(_deep_json(MAX_DEPTH - 1), "-o", "json")
    assert code == 0
    assert json.loads(stdout)["items"][0]["kind"] == "ConfigMap"


def _alias_bomb(levels: int) -> str:
    lines = ["apiVersion: v1", "kind: ConfigMap", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_before_it_is_expanded() -> None:
    code, stdout, stderr = translate_text(_alias_bomb(9), "-o", "json")
    assert code == 1
    assert stdout == ""
    assert f"aliases expand to more than {MAX_ALIAS_NODES} nodes" in stderr


def test_a_few_aliases_are_still_read() -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: &l {a: b}}\ndata: *l\n"
    (obj,) = load_objects(text, source="t")
    assert obj["data"] == {"a": "b"}


def test_many_small_documents_count_towards_one_bound() -> None:
    doc = (
        "---\napiVersion: v1\nkind: ConfigMap\ndata: &d {"
        + ", ".join(f"k{i}: v" for i in range(100))
        + "}\nmore: ["
        + ", ".join(["*d"] * 100)
        + "]\n"
    )
    with pytest.raises(ManifestError, match="aliases expand"):
        load_objects(doc * 120, source="t")


# --- duplicate keys --------------------------------------------------------------------------

HEAD = "apiVersion: v1\nkind: ConfigMap\n"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nkind: Deployment\n",
            't: line 4: duplicate key "kind" (first at line 2)',
            id="at the top",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    resources:\n"
            "      limits:\n        nvidia.com/gpumem: 100\n        nvidia.com/gpu: 1\n"
            "        nvidia.com/gpumem: 200\n",
            't: line 10: duplicate key "nvidia.com/gpumem" (first at line 8)',
            id="deep in a list item",
        ),
        pytest.param(
            HEAD + "---\n" + HEAD + "data:\n  a: x\n  'a': y\n",
            't: line 8: duplicate key "a" (first at line 7)',
            id="in a later document, however quoted",
        ),
        pytest.param(
            HEAD + "data: {1: x, 0x1: y}\n",
            "t: line 3, column 14: duplicate key 1 (first at line 3, column 8)",
            id="equal once read, on one line",
        ),
        pytest.param(
            '{"apiVersion": "v1", "kind": "ConfigMap", "kind": "Secret"}',
            't: line 1, column 43: duplicate key "kind" (first at line 1, column 22)',
            id="JSON",
        ),
        pytest.param(
            HEAD + "base: &b {x: 1, x: 2}\ndata: *b\n",
            't: line 3, column 17: duplicate key "x" (first at line 3, column 11)',
            id="in an anchored map",
        ),
    ],
)
def test_a_key_written_twice_is_refused_with_both_lines(text: str, line: str) -> None:
    with pytest.raises(ManifestError) as refused:
        load_objects(text, source="t")
    assert refused.value.lines == [line]


def test_a_merged_key_may_be_overridden() -> None:
    text = HEAD + "base: &b {x: 1, y: 2}\ndata:\n  <<: *b\n  x: 3\n"
    (obj,) = load_objects(text, source="t")
    assert obj["data"] == {"x": 3, "y": 2}


def test_translate_refuses_a_duplicate_key_with_exit_1() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n"
    code, stdout, stderr = translate_text(text)
    assert (code, stdout) == (1, "")
    assert stderr == '<stdin>: line 5: duplicate key "name" (first at line 4)\n'


# --- contradictions, limits and requests, selector length ------------------------------------


@pytest.mark.parametrize(
    ("annotations", "first", "second"),
    [
        (
            {"nvidia.com/use-gputype": "A100", "nvidia.com/nouse-gputype": "a100"},
            "use-gputype",
            "nouse-gputype",
        ),
        (
            {"nvidia.com/use-gputype": "A100-40GB,A100-80GB", "nvidia.com/nouse-gputype": "A100"},
            "use-gputype",
            "nouse-gputype",
        ),
        (
            {"nvidia.com/use-gpuuuid": "GPU-2", "volcano.sh/vgpu-nouse-gpuuuid": "GPU-1,GPU-2"},
            "nvidia.com/use-gpuuuid",
            "volcano.sh/vgpu-nouse-gpuuuid",
        ),
    ],
)
def test_a_gpu_both_chosen_and_avoided_is_refused_naming_both_annotations(
    annotations: dict[str, str], first: str, second: str
) -> None:
    code, _, stderr = translate_text(json.dumps(gpu_pod(annotations)))
    assert code == 1
    (line,) = stderr.splitlines()
    assert first in line
    assert second in line
    assert "both chosen and avoided" in line


def test_disjoint_choices_are_still_translated() -> None:
    annotations = {"nvidia.com/use-gputype": "A100", "nvidia.com/nouse-gputype": "H100"}
    code, _, _ = translate_text(json.dumps(gpu_pod(annotations)))
    assert code == 0


@pytest.mark.parametrize(
    "annotations",
    [
        {"nvidia.com/use-gputype": "H100,A100-80GB", "nvidia.com/nouse-gputype": "A100"},
        {"nvidia.com/use-gpuuuid": "GPU-1,GPU-2", "volcano.sh/vgpu-nouse-gpuuuid": "GPU-2"},
    ],
)
def test_a_choice_partly_ruled_out_is_translated_with_a_warning(
    annotations: dict[str, str],
) -> None:
    code, _, stderr = translate_text(json.dumps(gpu_pod(annotations)))
    assert code == 0
    (line,) = stderr.splitlines()
    assert line.startswith("warning: Pod/team-a/p: metadata.annotations[nvidia.com/use-gpu")
    assert "dropped what" in line


def test_gpu_requests_that_differ_from_limits_are_refused_naming_the_request() -> None:
    pod = gpu_pod(limits={"nvidia.com/gpu": 1}, requests={"nvidia.com/gpu": 2})
    code, _, stderr = translate_text(json.dumps(pod))
    assert code == 1
    assert "spec.containers[0].resources.requests[nvidia.com/gpu]: must equal" in stderr


def test_gpu_requests_equal_to_limits_in_another_spelling_are_fine() -> None:
    pod = gpu_pod(
        limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": "3000"},
        requests={"nvidia.com/gpu": "1", "nvidia.com/gpumem": 3000},
    )
    code, stdout, _ = translate_text(json.dumps(pod))
    assert code == 0
    translated = next(yaml.safe_load_all(stdout))
    assert translated["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu-main"}]


def test_three_hundred_uuids_are_refused_with_the_annotation() -> None:
    uuids = ",".join(f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd" for i in range(300))
    code, _, stderr = translate_text(json.dumps(gpu_pod({"nvidia.com/use-gpuuuid": uuids})))
    assert code == 1
    assert "metadata.annotations[nvidia.com/use-gpuuuid]: lists too many GPUs" in stderr


def test_two_hundred_uuids_still_fit_in_one_selector() -> None:
    uuids = ",".join(f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd" for i in range(200))
    code, _, _ = translate_text(json.dumps(gpu_pod({"nvidia.com/use-gpuuuid": uuids})))
    assert code == 0


def test_a_huge_bad_value_is_quoted_short_in_the_refusal() -> None:
    pod = gpu_pod(limits={"nvidia.com/gpumem": "x" * 100_000})
    code, _, stderr = translate_text(json.dumps(pod))
    assert code == 1
    assert "must be a whole number of MiB" in stderr
    assert len(stderr) < 500


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        ("spec: x", "ResourceSlice/s: spec: must be a map, got str"),
        ("spec: {devices: 5}", "ResourceSlice/s: spec.devices: must be a list"),
        ("spec: {devices: [5]}", "ResourceSlice/s: spec.devices[0]: must be a map, got int"),
        (
            "spec: {devices: [{basic: {capacity: [1]}}]}",
            "ResourceSlice/s: spec.devices[0].basic.capacity: must be a map, got list",
        ),
        (
            "spec: {devices: [{capacity: {memory: {value: 1e999999}}}]}",
            "ResourceSlice/s: spec.devices[0].capacity[memory].value: '1e999999' is beyond",
        ),
    ],
)
def test_a_malformed_inventory_slice_is_refused_naming_the_field(
    tmp_path: Path, spec: str, line: str
) -> None:
    slices = tmp_path / "slices.yaml"
    slices.write_text(
        f"apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: s}}\n{spec}\n"
    )
    result = run_cli(
        ["translate", "-f", "-", "--inventory", str(slices)], stdin=json.dumps(gpu_pod())
    )
    assert result.code == 1
    assert line in result.stderr
    assert "Traceback" not in result.stderr


def test_an_integer_too_long_for_python_is_a_manifest_error() -> None:
    text = json.dumps(gpu_pod(limits={"nvidia.com/gpu": "N"})).replace('"N"', "1" * 5000)
    code, _, stderr = translate_text(text)
    assert code == 1
    assert stderr.startswith("<stdin>: document: unreadable value:")
