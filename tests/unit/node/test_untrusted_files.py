"""A container owns its claim's dir: whatever it puts in place of its region file (a symlink to
/dev/zero, a FIFO, a huge file) neither blocks nor grows the agent's host-pids round or a
scrape; both return promptly and report the claim as unreadable."""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.node.claims import GPUS, NODE, UID
from tests.unit.node.fake_api import FakeApi
from tests.unit.node.test_checkpoint import CLAIM
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node import checkpoint
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.hostpids import FILE, HostPidFiles
from vgpu_bridge.node.metrics import NodeCollector
from vgpu_bridge.node.state import DeviceState

PLANTS = ["symlink to /dev/zero", "fifo", "8 GiB file"]


def _plant(path: Path, what: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if what == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    elif what == "fifo":
        os.mkfifo(path)
    else:
        with path.open("wb") as handle:
            handle.truncate(8 * 2**30)


def _finishes(work: Callable[[], object]) -> bool:
    """Whether `work` finished within a generous 10 s, run in a thread (a read blocked on a FIFO
    or streaming /dev/zero never does), and the agent's peak memory grew by less than 64 MiB."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout=10)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return not thread.is_alive() and grown_kib < 64 * 1024


@pytest.mark.parametrize("what", PLANTS)
def test_the_host_pids_round_is_not_held_by_a_planted_region(tmp_path: Path, what: str) -> None:
    vgpu = tmp_path / "vgpu"
    _plant(vgpu / "claims" / UID / "vgpu.cache", what)
    files = HostPidFiles(lambda: [UID], vgpu_dir=vgpu, proc=tmp_path / "proc")
    assert _finishes(files.sync)
    assert not (vgpu / "claims" / UID / FILE).exists()


@pytest.mark.parametrize("what", PLANTS)
def test_a_scrape_is_not_held_by_a_planted_region(tmp_path: Path, what: str) -> None:
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    claim = CLAIM.model_copy(update={"uid": UID})
    checkpoint_file = tmp_path / "plugin" / "checkpoint.json"
    checkpoint_file.parent.mkdir()
    checkpoint.save(checkpoint_file, {UID: claim})
    state = DeviceState(FakeApi(), node=NODE, profile=DEFAULT, gpus=GPUS, layout=layout,
                        checkpoint_file=checkpoint_file)  # fmt: skip
    state.start()
    _plant(layout.shared_dir(UID) / "vgpu.cache", what)
    collector = NodeCollector(state, GPUS, node=NODE, vgpu_dir=layout.vgpu_dir)
    metrics: list[object] = []
    assert _finishes(lambda: metrics.extend(collector.collect()))
    readable = next(
        m for m in metrics if getattr(m, "name", "") == "vgpu_bridge_claim_region_readable"
    )
    assert [s.value for s in readable.samples] == [0]  # type: ignore[attr-defined]
    state.close()
