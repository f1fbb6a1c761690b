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


def start_agent(
    node: RealNode,
    cluster: LocalCluster,
    native: NativeParts,
    gpus: list[dict[str, str]],
    *,
    driver_root: DriverRootFlags | None = None,
) -> tuple[Component, str]:
    """Start the agent (recorded with the node's components, so ``down`` stops it), given
    ``driver_root`` with ``--driver-root`` (and ``--driver-root-mount``), and wait until the
    kubelet has registered it and it has published ``len(gpus)`` devices in the node's
    ResourceSlice; the component and the URL of its /metrics."""
    layout = node.layout
    install_libvgpu(layout, native)
    environ = {key: value for key, value in os.environ.items() if not key.startswith("VGPU_")}
    environ["VGPU_BRIDGE_MOCK_GPUS"] = json.dumps(gpus)
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
        *(driver_root.args() if driver_root is not None else []),
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
    client = cluster.client()
    wait_started(
        lambda: (
            _registrations(log) > registrations_before
            and published_devices(client, node.name) == len(gpus)
        ),
        what="the agent registered by the kubelet and its ResourceSlice",
        component=component,
    )
    return component, f"http://127.0.0.1:{metrics_port}/metrics"


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


def published_devices(client: KubeClient, node_name: str) -> int:
    selector = f"spec.nodeName={node_name},spec.driver={DEFAULT.driver}"
    slices = client.items(f"{RESOURCE}/resourceslices", fieldSelector=selector)
    return sum(len(s["spec"].get("devices", [])) for s in slices)
