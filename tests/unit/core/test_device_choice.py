"""Device choice: `use-gputype` / `nouse-gputype` and `use-gpuuuid` / `nouse-gpuuuid` (issue 25.7).

HAMi refuses a card that a `nouse` entry matches even when a `use` entry matches it too
(`checkType`, `CheckUUID`), and admits the pod when some chosen entry is left: `A100,L4` without
`A100` picks L4 cards. A type is a case-insensitive substring of the product name, so a `nouse`
type within a `use` type rules that one out; a uuid is matched exactly.
"""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.core import DeviceFilter, InvalidRequest, TranslationContext, translate
from vgpu_bridge.core.annotations import read_filter
from vgpu_bridge.core.models import Problems

USE_TYPE, AVOID_TYPE = "nvidia.com/use-gputype", "nvidia.com/nouse-gputype"
USE_UUID, AVOID_UUID = "nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"
VOLCANO_USE_UUID = "volcano.sh/vgpu-use-gpuuuid"
PRODUCT = 'device.attributes["gpu.vgpu-bridge.io"].productName.lowerAscii()'


def read(annotations: dict[str, str]) -> tuple[DeviceFilter, Problems, list[str]]:
    problems, warnings = Problems(), list[str]()
    device_filter = read_filter(
        annotations, meta_path="metadata", problems=problems, warnings=warnings
    )
    return device_filter, problems, warnings


@pytest.mark.parametrize(
    ("annotations", "expected", "dropped"),
    [
        pytest.param(
            {USE_TYPE: "A100,L4", AVOID_TYPE: "A100"},
            DeviceFilter(use_types=("L4",), avoid_types=("A100",)),
            "'A100' by 'A100'",
            id="a type named in both is dropped, the other kept",
        ),
        pytest.param(
            {USE_TYPE: "H100,A100-80GB", AVOID_TYPE: "a100"},
            DeviceFilter(use_types=("H100",), avoid_types=("a100",)),
            "'A100-80GB' by 'a100'",
            id="an avoided type within a chosen one rules it out, in any case",
        ),
        pytest.param(
            {USE_UUID: "abc,123", AVOID_UUID: "abc"},
            DeviceFilter(use_uuids=("123",), avoid_uuids=("abc",)),
            "'abc' by 'abc'",
            id="a uuid named in both is dropped, the other kept",
        ),
        pytest.param(
            {VOLCANO_USE_UUID: "GPU-1,GPU-2", AVOID_UUID: "GPU-2"},
            DeviceFilter(use_uuids=("GPU-1",), avoid_uuids=("GPU-2",)),
            "'GPU-2' by 'GPU-2'",
            id="across the dialects' annotations",
        ),
    ],
)
def test_chosen_entries_that_are_ruled_out_are_dropped_with_a_warning(
    annotations: dict[str, str], expected: DeviceFilter, dropped: str
) -> None:
    device_filter, problems, warnings = read(annotations)
    assert not problems, problems.errors
    assert device_filter == expected
    (warning,) = warnings
    assert warning.startswith(f"metadata.annotations[{next(iter(annotations))}]: dropped what")
    assert dropped in warning


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({USE_TYPE: "A100", AVOID_TYPE: "A100-80GB"}, id="A100-40GB cards remain"),
        pytest.param({USE_TYPE: "A100", AVOID_TYPE: "H100"}, id="disjoint types"),
        pytest.param({USE_UUID: "GPU-12", AVOID_UUID: "GPU-1"}, id="uuids are not substrings"),
        pytest.param({USE_UUID: "GPU-a", AVOID_UUID: "gpu-A"}, id="uuids are case-sensitive"),
    ],
)
def test_a_choice_no_avoided_entry_rules_out_is_kept_whole(annotations: dict[str, str]) -> None:
    device_filter, problems, warnings = read(annotations)
    assert not problems
    assert not warnings
    chosen = device_filter.use_types or device_filter.use_uuids
    assert chosen == (next(iter(annotations.values())),)


@pytest.mark.parametrize(
    ("annotations", "chosen_key", "avoided_key"),
    [
        pytest.param({USE_TYPE: "A100", AVOID_TYPE: "a100"}, USE_TYPE, AVOID_TYPE, id="one type"),
        pytest.param(
            {USE_TYPE: "A100-80GB,a100-40gb", AVOID_TYPE: "L4,A100"},
            USE_TYPE,
            AVOID_TYPE,
            id="every type contains an avoided one",
        ),
        pytest.param({USE_UUID: "abc", AVOID_UUID: "abc,123"}, USE_UUID, AVOID_UUID, id="one uuid"),
        pytest.param(
            {VOLCANO_USE_UUID: "GPU-1,GPU-2", AVOID_UUID: "GPU-2,GPU-1"},
            VOLCANO_USE_UUID,
            AVOID_UUID,
            id="every uuid, across dialects",
        ),
    ],
)
def test_a_choice_whose_every_entry_is_ruled_out_is_refused_naming_both_annotations(
    annotations: dict[str, str], chosen_key: str, avoided_key: str
) -> None:
    _, problems, warnings = read(annotations)
    (error,) = problems.errors
    assert error.path == f"metadata.annotations[{chosen_key}]"
    assert f"metadata.annotations[{avoided_key}] rules out every GPU" in error.reason
    assert "no GPU can be both chosen and avoided" in error.reason
    assert not warnings


def selectors(annotations: dict[str, str]) -> list[str]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    (template,) = translate(pod, context=TranslationContext()).templates
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    return [s["cel"]["expression"] for s in request["exactly"]["selectors"]]


def test_the_claim_chooses_what_is_left_and_still_avoids_what_was_ruled_out() -> None:
    assert selectors({USE_TYPE: "A100,L4", AVOID_TYPE: "A100"}) == [
        f'{PRODUCT}.contains("l4")',
        f'!({PRODUCT}.contains("a100"))',
    ]


def test_a_pod_whose_every_choice_is_ruled_out_gets_no_claim() -> None:
    with pytest.raises(InvalidRequest, match="no GPU can be both chosen and avoided"):
        selectors({USE_UUID: "abc", AVOID_UUID: "abc"})
