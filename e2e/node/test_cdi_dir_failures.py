"""A full or read-only CDI directory: each claim fails with the reason, nothing is half-written,
and the same claims prepare once the directory is usable again (real API server, a real tiny
tmpfs mounted as the CDI directory)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster import KubeClient
from e2e.node.claims import allocated_claim
from tests.integration.node_harness import AgentDirs, agent_dirs
from tests.unit.node.claims import GPUS
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.node import checkpoint
from vgpu_bridge.node.state import ClaimRef, DeviceState

pytestmark = pytest.mark.e2e


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


@pytest.fixture
def tiny_cdi_dir() -> Iterator[AgentDirs]:
    """Agent dirs whose CDI dir is a 64 KiB tmpfs (root only: skipped where mount is refused)."""
    with agent_dirs() as dirs:
        cdi = dirs.layout.cdi_dir
        cdi.mkdir(parents=True)
        if not _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(cdi)):
            pytest.skip("cannot mount a tmpfs here (needs root)")
        try:
            yield dirs
        finally:
            subprocess.run(["umount", str(cdi)], check=False)


def _fill(directory: Path) -> None:
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass  # full
    finally:
        os.close(fd)


def test_a_full_or_read_only_cdi_dir_fails_each_claim_and_leaves_nothing(
    kube: KubeClient, agent_api: KubeApi, namespace: str, agent_node: str, tiny_cdi_dir: AgentDirs
) -> None:
    dirs = tiny_cdi_dir
    state = DeviceState(agent_api, node=agent_node, profile=DEFAULT, gpus=GPUS,
                        layout=dirs.layout, checkpoint_file=dirs.checkpoint)  # fmt: skip
    state.start()
    claims = [allocated_claim(kube, namespace, f"c{i}", node=agent_node) for i in range(2)]
    refs = [ClaimRef(namespace, c["metadata"]["name"], c["metadata"]["uid"]) for c in claims]
    cdi = dirs.layout.cdi_dir

    _fill(cdi)
    full = state.prepare(refs)
    assert all("No space left on device" in (p.error or "") for p in full.values()), full
    assert [p.name for p in cdi.iterdir()] == ["filler"]  # no spec, no temp file
    assert not (dirs.layout.vgpu_dir / "claims").exists() or not any(
        (dirs.layout.vgpu_dir / "claims").iterdir()
    )
    assert checkpoint.load(dirs.checkpoint) == {}

    (cdi / "filler").unlink()
    assert _mount("-o", "remount,ro", str(cdi))
    read_only = state.prepare(refs)
    assert all("Read-only file system" in (p.error or "") for p in read_only.values()), read_only
    assert not any(cdi.iterdir())

    assert _mount("-o", "remount,rw", str(cdi))
    usable = state.prepare(refs)
    assert all(p.error is None for p in usable.values()), usable
    assert sorted(p.name for p in cdi.iterdir()) == sorted(
        dirs.layout.spec_path(r.uid).name for r in refs
    )
    assert set(checkpoint.load(dirs.checkpoint)) == {r.uid for r in refs}
