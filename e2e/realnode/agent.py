"""Our node agent on the real node: ``vgpu-bridge node`` as a root host process with mock GPUs.

It registers through the real kubelet's plugin registry (``<kubelet root>/plugins_registry``),
serves DRA on ``<kubelet root>/plugins/<driver>/dra.sock``, writes CDI specs where the node's
containerd reads them, and mounts ``libvgpu.so`` + ``ld.so.preload`` from the node's vgpu dir,
installed by the same code as the chart's init container.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.client import KubeClient
from e2e.cluster.controlplane import LocalCluster
from e2e.cluster.processes import free_port
from e2e.realnode.build import NativeParts
from e2e.realnode.driver_root import DriverRootFlags
from e2e.realnode.host import Layout
from e2e.realnode.node import Component, RealNode, record_pids, stop_component, wait_started
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.library import install

RESOURCE = "/apis/resource.k8s.io/v1"
AGENT = "node-agent"
#: the agent's log line once the kubelet has taken its registration (grpc.py)
REGISTERED = "registered with the kubelet"
#: where the scenario expects libvgpu in a claimed container (the path the CDI spec mounts)
CONTAINER_LIBVGPU = "/usr/local/vgpu/libvgpu.so"


def vgpu_dir(layout: Layout) -> Path:
    return layout.root / "vgpu"


def install_libvgpu(layout: Layout, native: NativeParts) -> Path:
    """libvgpu.so and the ld.so.preload that CDI mounts as the container's /etc/ld.so.preload,
    installed by the code the chart's init container runs (`vgpu-bridge node install-libvgpu`)."""
    directory = vgpu_dir(layout)
    install(native.libvgpu, directory)
    return directory


@dataclass(frozen=True)
class LaunchedAgent:
    """A started agent process: its component, its /metrics and the kubelet's registrations in
    the agents' log before it started (so its own registration can be told apart)."""

    component: Component
    metrics_url: str
    registrations_before: int

    def registered(self) -> bool:
        return _registrations(self.component.log) > self.registrations_before


def launch_agent(
    node: RealNode,
    cluster: LocalCluster,
    environ: dict[str, str],
    args: list[str],
    *,
    driver: str = DEFAULT.driver,
) -> LaunchedAgent:
    """Start ``vgpu-bridge node`` for ``node`` with the tier's directories, ``environ`` and the
    extra ``args``, its DRA socket in the kubelet's plugin dir of ``driver`` (the name it runs
    as), recorded with the node's components (so ``down`` stops it); no waiting."""
    layout = node.layout
    metrics_port = free_port()
    command = [
        "-m", "vgpu_bridge.cli", "node",
        "--node-name", node.name,
        "--plugin-dir", str(layout.kubelet_dir / "plugins" / driver),
        "--registry-dir", str(layout.kubelet_dir / "plugins_registry"),
        "--cdi-dir", str(layout.cdi_dir),
        "--vgpu-dir", str(vgpu_dir(layout)),
        "--kubeconfig", str(cluster.kubeconfig),
        "--metrics-listen", f"127.0.0.1:{metrics_port}",
        "--resync-seconds", "2",
        *args,
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
    return LaunchedAgent(
        component, f"http://127.0.0.1:{metrics_port}/metrics", registrations_before
    )


def wait_published(
    node: RealNode,
    cluster: LocalCluster,
    agent: LaunchedAgent,
    *,
    published: int,
    driver: str = DEFAULT.driver,
) -> None:
    """Until the kubelet has registered ``agent`` and it publishes ``published`` devices as
    ``driver``."""
    client = cluster.client()
    wait_started(
        lambda: agent.registered() and published_devices(client, node.name, driver) == published,
        what="the agent registered by the kubelet and its ResourceSlice",
        component=agent.component,
    )


def start_agent(
    node: RealNode,
    cluster: LocalCluster,
    native: NativeParts,
    gpus: list[dict[str, str]],
    *,
    driver_root: DriverRootFlags | None = None,
) -> tuple[Component, str]:
    """Start the agent with mock ``gpus``, given ``driver_root`` with ``--driver-root`` (and
    ``--driver-root-mount``), and wait until the kubelet has registered it and it has published
    ``len(gpus)`` devices in the node's ResourceSlice; the component and the URL of its /metrics."""
    install_libvgpu(node.layout, native)
    environ = {key: value for key, value in os.environ.items() if not key.startswith("VGPU_")}
    environ["VGPU_BRIDGE_MOCK_GPUS"] = json.dumps(gpus)
    args = driver_root.args() if driver_root is not None else []
    agent = launch_agent(node, cluster, environ, args)
    wait_published(node, cluster, agent, published=len(gpus))
    return agent.component, agent.metrics_url


def restart_agent(
    node: RealNode,
    cluster: LocalCluster,
    native: NativeParts,
    gpus: list[dict[str, str]],
    *,
    driver_root: DriverRootFlags | None,
) -> str:
    """Stop the running agent and start it again with ``driver_root`` (the node, kubelet and
    cluster stay); the URL of its /metrics."""
    stop_component(node, AGENT)
    return start_agent(node, cluster, native, gpus, driver_root=driver_root)[1]


def _registrations(log: Path) -> int:
    try:
        return log.read_text(errors="replace").count(REGISTERED)
    except FileNotFoundError:
        return 0


def published_devices(client: KubeClient, node_name: str, driver: str = DEFAULT.driver) -> int:
    selector = f"spec.nodeName={node_name},spec.driver={driver}"
    slices = client.items(f"{RESOURCE}/resourceslices", fieldSelector=selector)
    return sum(len(s["spec"].get("devices", [])) for s in slices)
