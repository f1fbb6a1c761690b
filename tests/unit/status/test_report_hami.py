"""`kubectl vgpu status --profile hami`: HAMi's driver types its cards `hami-gpu`; they are
cards all the same (only MIG and VFIO devices are not, as the inventory reads them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vgpu_bridge.core import HAMI
from vgpu_bridge.status import build_report

SLICE = Path(__file__).parents[2] / "data" / "inventory-hami.yaml"


def hami_slices() -> list[dict[str, Any]]:
    return [yaml.safe_load(SLICE.read_text())]


def test_hamis_cards_typed_hami_gpu_are_shown() -> None:
    report = build_report(hami_slices(), [], [], profile=HAMI)
    [card] = report.cards
    assert (card.node, card.device, card.product, card.memory, card.cores) == (
        "node-c", "hami-gpu-0", "NVIDIA L4", 24 * 2**30, 100)  # fmt: skip


def test_a_hami_device_typed_mig_or_vfio_is_no_card() -> None:
    slices = hami_slices()
    device = slices[0]["spec"]["devices"][0]
    for kind in ("mig", "vfio"):
        slices[0]["spec"]["devices"].append(
            {**device, "name": f"{kind}-0", "attributes": {"type": {"string": kind}}}
        )
    assert [c.device for c in build_report(slices, [], [], profile=HAMI).cards] == ["hami-gpu-0"]
