"""The agent with --driver-root: the driver's files are found once, at build, and every claim's
spec carries them; without libcuda at the GPUs' driver version the agent does not start."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.unit.node.agent_settings import agent_settings
from tests.unit.node.claims import UID, allocated_claim, result
from tests.unit.node.driver_install import VERSION, install_driver
from tests.unit.node.fake_api import FakeApi
from vgpu_bridge.node.app import build, driver_watch, workers
from vgpu_bridge.node.driver_root import DriverRootError
from vgpu_bridge.node.gpus import mock_gpus
from vgpu_bridge.node.settings import Settings
from vgpu_bridge.node.state import ClaimRef

MOCK = f"[{{uuid: GPU-aaaa, productName: H100, memory: 80Gi, driverVersion: '{VERSION}'}}]"


def _settings(tmp_path: Path, **extra: object) -> Settings:
    return agent_settings(tmp_path, **{"mock_gpus": MOCK, "device_health": False, **extra})


def _container_paths(tmp_path: Path, settings: Settings) -> list[str]:
    agent = build(settings, FakeApi(), gpus=mock_gpus(MOCK))
    ref = ClaimRef(namespace="team-a", name="pod-gpu-x1", uid=UID)
    prepared = agent.state.plan(allocated_claim(result("gpu-0"), uid=UID), ref)
    mounts = json.loads(prepared.cdi_spec)["containerEdits"]["mounts"]
    return [m["containerPath"] for m in mounts if m["hostPath"].startswith("/run/nvidia/driver/")]


def test_every_claims_spec_carries_the_driver_found_at_the_mount_under_the_host_root(
    tmp_path: Path,
) -> None:
    install_driver(tmp_path / "driver-root", library_dir="usr/lib64")
    settings = _settings(tmp_path, driver_root="/run/nvidia/driver",
                         driver_root_mount=str(tmp_path / "driver-root"))  # fmt: skip
    paths = _container_paths(tmp_path, settings)
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.1" in paths
    assert "/usr/lib64/libnvidia-ml.so.1" in paths
    assert "/usr/bin/nvidia-smi" in paths


def test_without_a_driver_root_no_spec_carries_driver_files(tmp_path: Path) -> None:
    assert _container_paths(tmp_path, _settings(tmp_path)) == []


def test_without_libcuda_at_the_gpus_driver_version_the_agent_is_not_built(tmp_path: Path) -> None:
    install_driver(tmp_path / "driver-root", version="550.54.15")
    settings = _settings(tmp_path, driver_root=str(tmp_path / "driver-root"))
    with pytest.raises(DriverRootError, match=f"no libcuda.so.{VERSION}"):
        build(settings, FakeApi(), gpus=mock_gpus(MOCK))


def test_the_command_exits_1_naming_the_driver_root_when_libcuda_is_missing(
    tmp_path: Path,
) -> None:
    """In a fresh interpreter: the command configures this process's logging."""
    root = tmp_path / "driver-root"
    root.mkdir()
    args = ["node", "--node-name", "n", "--mock-gpus", MOCK, "--driver-root", str(root),
            "--plugin-dir", str(tmp_path), "--registry-dir", str(tmp_path),
            "--cdi-dir", str(tmp_path / "cdi"), "--metrics-listen", ""]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "vgpu_bridge.cli", *args], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 1
    assert f"cannot start: driver root {root}: no libcuda.so.{VERSION}" in done.stderr
    assert "Traceback" not in done.stderr


def test_when_the_drivers_libcuda_is_gone_the_agent_stops_to_find_the_new_one(
    tmp_path: Path,
) -> None:
    """A driver upgrade removes the old version's files: specs naming them would fail every new
    container, so the agent stops and its restart (the DaemonSet's) finds the new driver."""
    libraries = install_driver(tmp_path / "driver-root")
    agent = build(_settings(tmp_path, driver_root=str(tmp_path / "driver-root")), FakeApi(),
                  gpus=mock_gpus(MOCK))  # fmt: skip
    stop = threading.Event()
    assert "driver-files" in [worker.name for worker in workers(agent, stop)]
    check = driver_watch(agent, stop)
    check()
    assert not stop.is_set()
    (libraries / f"libcuda.so.{VERSION}").unlink()
    check()
    assert stop.is_set()


def test_without_a_driver_root_nothing_watches_driver_files(tmp_path: Path) -> None:
    agent = build(_settings(tmp_path), FakeApi(), gpus=mock_gpus(MOCK))
    assert "driver-files" not in [worker.name for worker in workers(agent, threading.Event())]
