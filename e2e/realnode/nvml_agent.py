"""Our node agent on the real node in NVML mode: no mock GPUs; pynvml reads the cards from
native/vgpu's fake ``libnvidia-ml.so.1``, found on ``LD_LIBRARY_PATH`` as a host install's real one
is found on the loader's path, and the fake's knobs say what the cards are (``FAKE_CUDA_DEVICES``,
``FAKE_NVML_MIG_MODES``: native/vgpu/tests/fake/fake.h). Started like ``agent.start_agent`` (a root
host process recorded with the node's components, so ``down`` stops it), with the same
directories, libvgpu installed by the product's own code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.controlplane import LocalCluster
from e2e.cluster.processes import free_port
from e2e.realnode.agent import AGENT, REGISTERED, published_devices, vgpu_dir
from e2e.realnode.build import NATIVE_DIR
from e2e.realnode.driver_root import DRIVER_VERSION
from e2e.realnode.node import Component, RealNode, record_pids, wait_started
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.library import install

LIBVGPU = NATIVE_DIR / "build" / "libvgpu.so"
FAKE_NVML = NATIVE_DIR / "build" / "fake" / "libnvidia-ml.so.1"


def fake_card_uuid(index: int) -> str:
    """The UUID the fake NVML gives card `index` (fake.h)."""
    return f"GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae{index:02x}"


@dataclass(frozen=True)
class NvmlAgent:
    component: Component
    metrics_url: str
    registrations_before: int  # the kubelet's registrations in the agents' log before it started

    def registered(self) -> bool:
        return _registrations(self.component.log) > self.registrations_before


def start_nvml_agent(
    node: RealNode, cluster: LocalCluster, *, cards: int, mig_modes: str, published: int
) -> NvmlAgent:
    """Start the agent over `cards` fake NVML cards in the MIG modes `mig_modes` (a comma list
    of 0/1) and wait until the kubelet has registered it and it publishes `published` devices."""
    agent = launch_nvml_agent(node, cluster, cards=cards, mig_modes=mig_modes)
    wait_published(node, cluster, agent, published=published)
    return agent


def launch_nvml_agent(
    node: RealNode,
    cluster: LocalCluster,
    *,
    cards: int,
    mig_modes: str,
    gpu_wait_seconds: int = 60,
) -> NvmlAgent:
    """Start the agent as `start_nvml_agent` does, without waiting for anything; it looks again
    every `gpu_wait_seconds` while it has nothing to publish."""
    subprocess.run(["make", "-C", str(NATIVE_DIR), "--no-print-directory", "-s",
                    str(LIBVGPU.relative_to(NATIVE_DIR)), str(FAKE_NVML.relative_to(NATIVE_DIR))],
                   check=True)  # fmt: skip
    layout = node.layout
    install(LIBVGPU, vgpu_dir(layout))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("VGPU_", "NVIDIA_"))}
    environ |= {
        "LD_LIBRARY_PATH": str(FAKE_NVML.parent),
        "FAKE_CUDA_DEVICES": str(cards),
        "FAKE_NVML_MIG_MODES": mig_modes,
        "FAKE_NVML_DRIVER_VERSION": DRIVER_VERSION,
    }
    metrics_port = free_port()
    command = [
        "-m", "vgpu_bridge.cli", "node",
        "--node-name", node.name,
        "--plugin-dir", str(layout.kubelet_dir / "plugins" / DEFAULT.driver),
        "--registry-dir", str(layout.kubelet_dir / "plugins_registry"),
        "--cdi-dir", str(layout.cdi_dir),
        "--vgpu-dir", str(vgpu_dir(layout)),
        "--kubeconfig", str(cluster.kubeconfig),
        "--metrics-listen", f"127.0.0.1:{metrics_port}",
        "--resync-seconds", "2",
        "--gpu-wait-seconds", str(gpu_wait_seconds),
    ]  # fmt: skip
    log = layout.logs / "node-agent.log"
    registrations_before = _registrations(log)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, *command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=environ,
            cwd=Path(__file__).resolve().parents[2],
        )
    component = Component(AGENT, process.pid, Path(sys.executable), log, process)
    node.components.append(component)
    record_pids(node)
    return NvmlAgent(component, f"http://127.0.0.1:{metrics_port}/metrics", registrations_before)


def wait_published(
    node: RealNode, cluster: LocalCluster, agent: NvmlAgent, *, published: int
) -> None:
    """Until the kubelet has registered `agent` and it publishes `published` devices."""
    client = cluster.client()
    wait_started(
        lambda: agent.registered() and published_devices(client, node.name) == published,
        what="the NVML agent registered by the kubelet and its ResourceSlice",
        component=agent.component,
    )


def _registrations(log: Path) -> int:
    try:
        return log.read_text(errors="replace").count(REGISTERED)
    except FileNotFoundError:
        return 0
