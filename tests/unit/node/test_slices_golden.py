"""Golden ResourceSlices: tests/data/node/slices/<case>/gpus.yaml (a mock GPU file) → slices.yaml.

Regenerate after a deliberate change with `UPDATE_GOLDEN=1`, then read the diff: the goldens are
the specification of what the node agent publishes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.gpus import load_mock_gpus
from vgpu_bridge.node.slices import build_slices

DATA = Path(__file__).resolve().parents[2] / "data" / "node" / "slices"
CASES = sorted(p for p in DATA.iterdir() if p.is_dir())
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_slices_golden(case: Path) -> None:
    gpus = load_mock_gpus(case / "gpus.yaml")
    slices = build_slices(
        gpus, node="node-a", profile=DEFAULT, generation=3, node_uid="0d9e-node-uid"
    )
    actual = yaml.safe_dump_all(slices, sort_keys=True)
    golden = case / "slices.yaml"
    if UPDATE:
        golden.write_text(actual)
    assert actual == golden.read_text(), f"{golden} differs"
