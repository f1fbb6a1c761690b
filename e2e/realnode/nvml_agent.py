"""Our node agent on the real node in NVML mode: no mock GPUs; pynvml reads the cards from
native/vgpu's fake ``libnvidia-ml.so.1``, laid out with the fake libcuda as a driver install of
``DRIVER_VERSION`` and loaded from there through ``--driver-root``, as the chart runs it on a real
node (the agent finds the driver's files by the version NVML reports), and the fake's knobs say
what the cards are (``FAKE_CUDA_DEVICES``,
``FAKE_NVML_MIG_MODES``: native/vgpu/tests/fake/fake.h). Started like ``agent.start_agent`` (a root
host process recorded with the node's components, so ``down`` stops it), with the same
directories, libvgpu installed by the product's own code.
"""

from __future__ import annotations

import os
import subprocess

from e2e.cluster.controlplane import LocalCluster
from e2e.realnode import driver_root
from e2e.realnode.agent import LaunchedAgent, launch_agent, vgpu_dir, wait_published
from e2e.realnode.build import NATIVE_DIR
from e2e.realnode.driver_root import DRIVER_VERSION
from e2e.realnode.node import RealNode
from vgpu_bridge.node.library import install

LIBVGPU = NATIVE_DIR / "build" / "libvgpu.so"
FAKE_NVML = NATIVE_DIR / "build" / "fake" / "libnvidia-ml.so.1"
FAKE_CUDA = NATIVE_DIR / "build" / "fake" / "libcuda.so.1"


def fake_card_uuid(index: int) -> str:
    """The UUID the fake NVML gives card `index` (fake.h)."""
    return f"GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae{index:02x}"


def start_nvml_agent(
    node: RealNode, cluster: LocalCluster, *, cards: int, mig_modes: str, published: int
) -> LaunchedAgent:
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
) -> LaunchedAgent:
    """Start the agent as `start_nvml_agent` does, without waiting for anything; it looks again
    every `gpu_wait_seconds` while it has nothing to publish."""
    subprocess.run(["make", "-C", str(NATIVE_DIR), "--no-print-directory", "-s",
                    *(str(p.relative_to(NATIVE_DIR)) for p in (LIBVGPU, FAKE_NVML, FAKE_CUDA))],
                   check=True)  # fmt: skip
    install(LIBVGPU, vgpu_dir(node.layout))
    root = node.layout.root / "nvml-driver-root"  # the tier's state: `down` removes it
    driver_root.install(root, libraries={"libcuda.so.1": FAKE_CUDA, "libnvidia-ml.so.1": FAKE_NVML},
                        binaries={})  # fmt: skip
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("VGPU_", "NVIDIA_"))}
    environ.pop("LD_LIBRARY_PATH", None)
    environ |= {
        "FAKE_CUDA_DEVICES": str(cards),
        "FAKE_NVML_MIG_MODES": mig_modes,
        "FAKE_NVML_DRIVER_VERSION": DRIVER_VERSION,
    }
    flags = driver_root.DriverRootFlags(root).args()
    return launch_agent(
        node, cluster, environ, [*flags, "--gpu-wait-seconds", str(gpu_wait_seconds)]
    )
