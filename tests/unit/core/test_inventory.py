"""Card memory sizes per driver, learnt from ResourceSlices."""

from __future__ import annotations

import pytest

from vgpu_bridge.core import InvalidRequest, Inventory


def test_inventory_reads_sizes_per_driver_from_v1_and_v1beta1_slices() -> None:
    slices = [
        {"spec": {"driver": "d", "devices": [{"capacity": {"memory": {"value": "80Gi"}}}]}},
        {
            "spec": {
                "driver": "d",
                "devices": [{"basic": {"capacity": {"memory": {"value": "40Gi"}}}}],
            }
        },
        {"spec": {"driver": "e", "devices": [{"capacity": {"e/memory": {"value": "16Gi"}}}]}},
        {"spec": {"driver": "d", "devices": [{"capacity": {"cores": {"value": "100"}}}]}},
    ]
    inventory = Inventory.from_slices(slices)
    assert inventory.sizes("d") == (40 * 2**30, 80 * 2**30)
    assert inventory.sizes("e") == (16 * 2**30,)
    assert inventory.sizes("unknown") == ()


def test_inventory_names_the_slice_with_a_bad_size() -> None:
    bad = [
        {
            "metadata": {"name": "s1"},
            "spec": {"driver": "d", "devices": [{"capacity": {"memory": {"value": "lots"}}}]},
        }
    ]
    with pytest.raises(InvalidRequest, match=r"ResourceSlice/s1: spec.devices\[0\].capacity"):
        Inventory.from_slices(bad)
