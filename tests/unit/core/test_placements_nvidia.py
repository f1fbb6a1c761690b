"""Where a claim's NVIDIA shares sit and what each took: memory as recorded, SMs as the percent
its shares are of the card's N (None where the mode books no SMs); our enforcer is no placement."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.core import ENFORCER_DRIVER, nvidia_profile
from vgpu_bridge.core.placements import Placement, placements


def claim(consumed: dict[str, str]) -> dict[str, Any]:
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0",
         "consumedCapacity": consumed},
        {"request": "vgpu-limits", "driver": ENFORCER_DRIVER, "pool": "n1", "device": "enforcer"},
    ]  # fmt: skip
    return {"status": {"allocation": {"devices": {"results": results}}}}


@pytest.mark.parametrize(
    ("mode", "consumed", "cores", "units"),
    [
        ("4", {"memory": "1Gi", "shares": "1"}, 25, 1),
        ("100", {"memory": "1Gi", "shares": "30"}, 30, 30),
        ("memory", {"memory": "1Gi"}, None, None),
    ],
)
def test_an_nvidia_share_is_placed_with_its_sm_percent(
    mode: str, consumed: dict[str, str], cores: int | None, units: int | None
) -> None:
    found = placements(claim(consumed), profile=nvidia_profile(mode))
    assert found == [Placement("n1", "gpu-0", "gpu", 2**30, cores, units)]
