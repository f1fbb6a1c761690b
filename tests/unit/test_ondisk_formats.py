"""What this tree writes, the release before it reads (a downgrade, and that release's libvgpu in
containers still running after an upgrade): each format's version is the previous release's
(tests/fixtures/ondisk/<PREVIOUS_RELEASE>/formats.json, recorded by that release's own code),
and the checkpoint keeps its fields while its version stays. A format may change only as
docs/upgrade.md says: a new version, read beside the old one for a release; the checkpoint's old
version then has an upgrade in MIGRATIONS (a downgrade over it is refused, CheckpointTooNew)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from vgpu_bridge.node import checkpoint, region

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ondisk_fixtures.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ondisk_fixtures", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


script = _script()
NOW: dict[str, Any] = script.formats()
THEN: dict[str, Any] = json.loads(
    (ROOT / "tests" / "fixtures" / "ondisk" / script.PREVIOUS_RELEASE / "formats.json").read_text()
)


def test_the_checkpoint_keeps_its_fields_or_gets_a_new_version_that_upgrades_the_old() -> None:
    if NOW["checkpoint"] == THEN["checkpoint"]:
        # the previous release's model forbids unknown fields: it would quarantine this file
        assert NOW["checkpointFields"] == THEN["checkpointFields"], (
            "the checkpoint's fields changed under the same VERSION: give it a new one and an "
            "upgrade from this one in checkpoint.MIGRATIONS (docs/upgrade.md)"
        )
    else:
        assert THEN["checkpoint"] in checkpoint.MIGRATIONS


def test_the_agent_reads_the_previous_releases_region_version() -> None:
    assert THEN["regionVersion"] in region.LAYOUTS
    assert region.LAYOUTS[THEN["regionVersion"]].size == THEN["regionSize"]


# Shared live between the two releases: libvgpu of each in containers of one claim (region) or
# one node (boards); the host-pids file the new agent writes, the old libvgpu reads by its path.
# The limits file: the new libvgpu reads the old one (test_ondisk.c), the old agent rewrites it
# from the checkpoint's spec after a downgrade, in its own version.
SHARED = ["regionVersion", "regionSize", "boardSize", "hostPidsHeader", "limitsHeader"]


@pytest.mark.parametrize("key", SHARED)
def test_a_format_both_releases_use_at_once_is_the_previous_releases(key: str) -> None:
    assert NOW[key] == THEN[key], (
        f"{key} changed: the release before cannot use what this one writes. A new version must "
        "be read beside the old one for a release first (docs/upgrade.md), then this expectation "
        "moves with PREVIOUS_RELEASE"
    )
