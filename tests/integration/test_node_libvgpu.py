"""The agent's CDI spec, applied to a process as a container runtime would (env; the shared-region
mount becomes the host path), makes libvgpu enforce exactly the share, and the agent's metrics read
the process's usage from libvgpu's shared region. libvgpu and its fake CUDA driver are built from
native/vgpu; no GPU needed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.integration.node_harness import AgentDirs, agent_dirs, running_agent
from tests.native_workload import CUDA_DECLARATIONS, NATIVE, build_workload
from tests.unit.node.claims import GPUS, NODE, allocated_claim, result
from vgpu_bridge.node import checkpoint
from vgpu_bridge.node.cdi import CONTAINER_PRIORITY_DIR, CONTAINER_SHARED_DIR
from vgpu_bridge.node.hostpids import HostPidFiles
from vgpu_bridge.node.metrics import NodeCollector
from vgpu_bridge.node.state import ClaimRef

WORKLOAD = (
    CUDA_DECLARATIONS
    + r"""
int main(int argc, char **argv) {
    CUdevice dev; CUcontext ctx; CUdeviceptr p;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuCtxCreate_v2(&ctx, 0, dev)) return 90;
    for (int i = 1; i < argc; i++)
        printf("%d\n", (int)cuMemAlloc_v2(&p, (size_t)atoll(argv[i]) << 20));
    fflush(stdout);
    getchar(); /* stay alive, holding the memory, until stdin closes */
    return 0;
}
"""
)
CLAIM = allocated_claim(
    result("gpu-0", memory="3000Mi", cores="30"),
    uid="0c1a1d00-0000-4000-8000-00000000011b",
    name="lib",
)
REF = ClaimRef("team-a", "lib", "0c1a1d00-0000-4000-8000-00000000011b")


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_workload(tmp_path_factory.mktemp("workload"), WORKLOAD)


@pytest.fixture
def dirs() -> Iterator[AgentDirs]:
    with agent_dirs() as made:
        yield made


def _container_env(spec: dict[str, Any], dirs: AgentDirs) -> dict[str, str]:
    """What a runtime gives the container from the spec, with the region dir at its host path."""
    edits = [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"])]
    env = dict(entry.split("=", 1) for e in edits for entry in e["env"])
    host_dir = dirs.layout.shared_dir(REF.uid)
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = env["CUDA_DEVICE_MEMORY_SHARED_CACHE"].replace(
        CONTAINER_SHARED_DIR, str(host_dir)
    )
    assert env["CUDA_TASK_PRIORITY_DIR"] == CONTAINER_PRIORITY_DIR
    env["CUDA_TASK_PRIORITY_DIR"] = str(dirs.layout.priority_dir)
    return env


def test_libvgpu_enforces_the_share_in_the_spec_and_metrics_see_its_usage(
    workload: Path, dirs: AgentDirs
) -> None:
    with running_agent(dirs, GPUS, node=NODE) as seed:
        checkpoint.save(dirs.checkpoint, {REF.uid: seed.state.plan(CLAIM, REF)})
    with running_agent(dirs, GPUS, node=NODE) as agent:
        spec = json.loads(dirs.layout.spec_path(REF.uid).read_text())
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "LD_"))},
            **_container_env(spec, dirs),
            "LD_PRELOAD": str(NATIVE / "build" / "libvgpu.so"),
            "LD_LIBRARY_PATH": str(NATIVE / "build" / "fake"),
            "FAKE_CUDA_MEMORY": "80G",
        }
        process = subprocess.Popen(
            [str(workload), "2000", "1500", "900"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        assert process.stdin is not None
        try:
            codes = [process.stdout.readline().strip() for _ in range(3)]
            registry = CollectorRegistry()
            registry.register(
                NodeCollector(agent.state, GPUS, node=NODE, vgpu_dir=dirs.layout.vgpu_dir)
            )
            metrics = generate_latest(registry).decode()
        finally:
            process.stdin.close()
            stderr = process.stderr.read().decode() if process.stderr else ""
            process.wait(timeout=10)
    # 2000 MiB fits the 3000 MiB share, 1500 more would not (CUDA_ERROR_OUT_OF_MEMORY), 900 does
    assert codes == [b"0", b"2", b"0"], stderr
    used = [
        line for line in metrics.splitlines()
        if line.startswith("vgpu_bridge_claim_memory_used_bytes{") and REF.uid in line
    ]  # fmt: skip
    assert len(used) == 1, metrics
    assert float(used[0].rsplit(" ", 1)[1]) == 2900 * 2**20
    assert f'vgpu_bridge_claim_processes{{claim="lib",claim_uid="{REF.uid}"' in metrics
    by_container = [
        float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
        if line.startswith("vgpu_bridge_container_memory_used_bytes{") and REF.uid in line
    ]  # fmt: skip
    assert sum(by_container) == 2900 * 2**20  # this process, whatever container it runs in


def _can_unshare_pid_and_proc() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "-p", "-f", "--mount-proc", "true"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def test_the_agent_writes_the_host_pid_of_a_process_in_its_own_pid_namespace(
    workload: Path, dirs: AgentDirs
) -> None:
    """As in a pod (own pid namespace and /proc), libvgpu cannot tell its host pid; the agent finds
    it and writes it next to the region, keyed by the pid and start time libvgpu recorded."""
    if not _can_unshare_pid_and_proc():
        pytest.skip("needs unshare -p --mount-proc (root)")
    with running_agent(dirs, GPUS, node=NODE) as seed:
        checkpoint.save(dirs.checkpoint, {REF.uid: seed.state.plan(CLAIM, REF)})
    with running_agent(dirs, GPUS, node=NODE) as agent:
        spec = json.loads(dirs.layout.spec_path(REF.uid).read_text())
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "LD_"))},
            **_container_env(spec, dirs),
            "LD_PRELOAD": str(NATIVE / "build" / "libvgpu.so"),
            "LD_LIBRARY_PATH": str(NATIVE / "build" / "fake"),
        }
        process = subprocess.Popen(
            ["unshare", "-p", "-f", "--mount-proc", str(workload), "100"],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        assert process.stdin is not None
        try:
            assert process.stdout.readline().strip() == b"0"
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text()
            host_pid = int(children.split()[0])  # the workload: pid 1 in its namespace
            start = Path(f"/proc/{host_pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
            shared = dirs.layout.shared_dir(REF.uid)
            HostPidFiles(
                lambda: [c.uid for c in agent.state.snapshot()], vgpu_dir=dirs.layout.vgpu_dir
            ).sync()
            written = (shared / "host-pids").read_text()
        finally:
            process.stdin.close()
            process.wait(timeout=10)
    assert written == f"vgpu-host-pids 1\n1 {start} {host_pid}\n"
