"""ResourceSlice building rules beyond the goldens: chunking, names, versions, the share shape."""

from __future__ import annotations

import pytest

from vgpu_bridge.core import DEFAULT, HAMI
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.slices import DeviceTaint, build_slices, device, semver, slice_name


def _gpus(count: int) -> list[Gpu]:
    return [Gpu(index=i, uuid=f"GPU-{i}", product_name="X", memory=2**30) for i in range(count)]


def test_a_share_asks_memory_in_mebibytes_cores_in_percent_and_books_cores_in_thousandths() -> None:
    published = device(Gpu(0, "GPU-a", "NVIDIA H100", 80 * 2**30), DEFAULT)
    assert published["allowMultipleAllocations"] is True
    assert published["capacity"] == {
        "memory": {
            "value": "80Gi",
            "requestPolicy": {
                "default": "80Gi",
                "validRange": {"min": "1Mi", "step": "1Mi", "max": "80Gi"},
            },
        },
        "cores": {
            "value": "100",
            "requestPolicy": {
                "default": "100",
                "validRange": {"min": "0", "step": "1", "max": "100"},
            },
        },
        "milliCores": {
            "value": "100k",
            "requestPolicy": {
                "default": "1",
                "validRange": {"min": "1", "step": "1", "max": "100k"},
            },
        },
    }


def test_hamis_driver_publishes_no_core_booking_so_neither_do_we_under_its_profile() -> None:
    published = device(Gpu(0, "GPU-a", "NVIDIA H100", 80 * 2**30), HAMI)
    assert HAMI.core_booking_capacity is None
    assert set(published["capacity"]) == {"memory", "cores"}


def test_memory_is_published_as_whole_mebibytes_so_the_default_is_on_a_step() -> None:
    published = device(Gpu(0, "GPU-a", "X", 2**30 + 12345), DEFAULT)
    assert published["capacity"]["memory"]["value"] == "1Gi"


def test_the_profile_names_the_attributes_and_capacities() -> None:
    published = device(Gpu(0, "GPU-a", "X", 2**30), HAMI)
    assert set(published["capacity"]) == {HAMI.memory_capacity, HAMI.cores_capacity}
    assert HAMI.uuid_attribute in published["attributes"]


@pytest.mark.parametrize(
    ("count", "sizes"), [(0, [0]), (1, [1]), (128, [128]), (300, [128, 128, 44])]
)
def test_a_pool_is_cut_into_slices_of_at_most_128_devices(count: int, sizes: list[int]) -> None:
    slices = build_slices(_gpus(count), node="n", profile=DEFAULT, generation=7)
    assert [len(s["spec"].get("devices", [])) for s in slices] == sizes
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {len(sizes)}
    assert {s["spec"]["pool"]["generation"] for s in slices} == {7}
    names = [d["name"] for s in slices for d in s["spec"].get("devices", [])]
    assert names == [f"gpu-{i}" for i in range(count)]
    assert len({s["metadata"]["name"] for s in slices}) == len(sizes)


TAINT = DeviceTaint("gpu.vgpu-bridge.io/unhealthy", "xid-79", "NoSchedule", "2026-12-01T17:00:00Z")


@pytest.mark.parametrize(("count", "sizes"), [(64, [64]), (65, [64, 1]), (130, [64, 64, 2])])
def test_a_pool_with_a_tainted_card_is_cut_into_slices_of_at_most_64_devices(
    count: int, sizes: list[int]
) -> None:
    slices = build_slices(_gpus(count), node="n1", profile=DEFAULT, generation=1,
                          taints={"GPU-3": TAINT})  # fmt: skip
    assert [len(s["spec"]["devices"]) for s in slices] == sizes


def test_only_the_tainted_card_carries_the_taint_and_a_taint_for_no_card_changes_nothing() -> None:
    [tainted] = build_slices(_gpus(2), node="n1", profile=DEFAULT, generation=1,
                             taints={"GPU-1": TAINT})  # fmt: skip
    first, second = tainted["spec"]["devices"]
    assert "taints" not in first
    assert second["taints"] == [TAINT.to_json()]
    assert TAINT.to_json() == {
        "key": "gpu.vgpu-bridge.io/unhealthy",
        "value": "xid-79",
        "effect": "NoSchedule",
        "timeAdded": "2026-12-01T17:00:00Z",
    }
    untainted = build_slices(_gpus(130), node="n1", profile=DEFAULT, generation=1,
                             taints={"GPU-gone": TAINT})  # fmt: skip
    assert [len(s["spec"]["devices"]) for s in untainted] == [128, 2]


def test_without_a_node_uid_the_slices_have_no_owner() -> None:
    [published] = build_slices(_gpus(1), node="n", profile=DEFAULT, generation=1)
    assert "ownerReferences" not in published["metadata"]


def test_long_slice_names_are_shortened_with_a_hash_and_stay_distinct() -> None:
    node = "n" * 250
    first, second = slice_name(node, DEFAULT.driver, 0), slice_name(node, DEFAULT.driver, 1)
    assert len(first) == len(second) == 253
    assert first != second


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("9.0", "9.0.0"),
        ("570.124.06", "570.124.6"),
        ("12", "12.0.0"),
        ("1.2.3.4", None),
        ("v1.2", None),
        ("", None),
        (None, None),
    ],
)
def test_versions_are_normalised_to_semver_or_left_out(
    text: str | None, version: str | None
) -> None:
    assert semver(text) == version
