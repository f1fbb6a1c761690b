"""CDI specs in enforcer mode (issue 37): the limits only, no card of ours; each device names its
card in an annotation, from which the limits file is written; specs written before (the card in
NVIDIA_VISIBLE_DEVICES) still give the same limits file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from e2e.nvidia.slices import mock_uuid
from tests.unit.node.claims import NODE, UID
from tests.unit.node.nvidia_claims import (
    enforcer_config,
    enforcer_result,
    nvidia_claim,
    nvidia_result,
    nvidia_slice,
)
from vgpu_bridge.core.profiles import ENFORCER_DRIVER
from vgpu_bridge.node.cdi import CdiLayout, build_spec, limits_text
from vgpu_bridge.node.enforcer import enforced_shares
from vgpu_bridge.node.nvidia_slices import NvidiaCards

SHARE_C3 = "5b4f0a11-0000-4000-8000-0000000000c3"
LAYOUT = CdiLayout(cdi_dir=Path("/var/run/cdi"), vgpu_dir=Path("/usr/local/vgpu"),
                   driver=ENFORCER_DRIVER, enforcer=True)  # fmt: skip


def _spec(layout: CdiLayout = LAYOUT) -> dict[str, Any]:
    claim = nvidia_claim(
        nvidia_result("gpu-1", memory="3Gi", shares="50"),
        nvidia_result("gpu-0", memory="1Gi", shares="10", share_id=SHARE_C3),
        enforcer_result(),
        config=[enforcer_config(priority=1)],
    )  # fmt: skip
    cards = NvidiaCards(lambda: [nvidia_slice()], node=NODE)
    enforced = enforced_shares(claim, uid=UID, node=NODE, driver=ENFORCER_DRIVER, card=cards.card)
    return build_spec(enforced.shares, layout)


EXPECTED_LIMITS = (
    "vgpu-bridge-limits 2\n"
    f"CUDA_DEVICE_MEMORY_LIMIT_{mock_uuid(1)}=3072m\n"
    f"CUDA_DEVICE_SM_LIMIT_{mock_uuid(1)}=50\n"
    f"CUDA_DEVICE_MEMORY_LIMIT_{mock_uuid(0)}=1024m\n"
    f"CUDA_DEVICE_SM_LIMIT_{mock_uuid(0)}=10\n"
    "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/shared/vgpu.cache\n"
    "CUDA_TASK_PRIORITY=1\n"
)


def test_an_enforcer_spec_gives_no_card_and_no_driver_only_the_limits() -> None:
    spec = _spec()
    text = json.dumps(spec)
    assert "NVIDIA_VISIBLE_DEVICES" not in text
    assert "deviceNodes" not in text
    assert [d["annotations"] for d in spec["devices"]] == [
        {"enforcer.vgb.io/gpu-uuid": mock_uuid(1)},
        {"enforcer.vgb.io/gpu-uuid": mock_uuid(0)},
    ]
    assert limits_text(spec) == EXPECTED_LIMITS


def test_a_spec_that_names_its_cards_in_nvidia_visible_devices_still_reads() -> None:
    """The shape of the specs of our own mode, and of every spec written before issue 37."""
    spec = _spec(replace(LAYOUT, enforcer=False))
    assert "annotations" not in json.dumps(spec["devices"])
    assert limits_text(spec) == EXPECTED_LIMITS


def test_a_spec_that_names_no_card_for_a_device_is_refused() -> None:
    spec = _spec()
    del spec["devices"][0]["annotations"]
    with pytest.raises(ValueError, match="names 1 GPU UUIDs for 2 devices"):
        limits_text(spec)
