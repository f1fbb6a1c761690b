"""``up`` and ``down`` of the NVIDIA kind tier: the kind tier's cluster (``e2e.kind.cluster``)
with the mock driver root mounted into the first GPU worker, NVIDIA's plugin on it, and our
chart in its ``nvidiaDriver`` mode. Every step is printed with its time (``e2e.kind.steps``).

Volcano is not installed here (this tier checks the default scheduler's placement of NVIDIA's
shares); the kind values' mock GPUs are switched off, since an enforcer-mode agent publishes
no GPU of ours.
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from e2e.kind import cluster, dockerd, host
from e2e.kind.cluster import Kind
from e2e.kind.nvidia import driverroot, modes, plugin
from e2e.kind.nvidia.build import NvidiaBuild, ensure_build
from e2e.kind.rootfs import ensure_rootfs_image
from e2e.kind.steps import run
from e2e.waiting import wait_for
from vgpu_bridge.kube import KubeApi

Json = dict[str, Any]


def chart_values(mode: str) -> tuple[str, ...]:
    """The chart's values for this tier, over e2e/kind/values-kind.yaml: NVIDIA's mode, no mock
    GPUs (an enforcer-mode agent publishes none), no Volcano."""
    return (
        "--set", "nvidiaDriver.enabled=true",
        "--set-string", f"nvidiaDriver.consumableShares={mode}",
        "--set", "agent.mockGpus=null",
        "--set", "volcano.enabled=false",
    )  # fmt: skip


TIMINGS = "nvidia-up.json"
#: the image HAMi's own examples (../shared/upstream-examples/hami) run: the local Debian Python
#: root filesystem under that name, as the kind tier does for our examples' ubuntu:24.04
HAMI_EXAMPLE_IMAGE = "ubuntu:22.04"


def mount_mock_root(config: Json) -> None:
    """The first GPU worker of the kind config gets the mock driver root (same path inside,
    since NVIDIA's CDI specs name host paths) and the label NVIDIA's DaemonSet selects."""
    gpu_workers = [
        node for node in config["nodes"]
        if node["role"] == "worker" and "nvidia.com/gpu.present" in (node.get("labels") or {})
    ]  # fmt: skip
    first = gpu_workers[0]
    first["labels"] = {**first["labels"], plugin.MOCK_NODE_LABEL: "true"}
    mount = {"hostPath": str(driverroot.HOST_ROOT), "containerPath": str(driverroot.HOST_ROOT)}
    first["extraMounts"] = [*(first.get("extraMounts") or []), mount]


def up(
    kind: Kind, plugin_source: Path, mock_source: Path, mode: str = modes.DEFAULT_MODE
) -> dict[str, float]:
    """The built pieces, the cluster with NVIDIA's plugin publishing in ``mode`` (its
    ``--consumable-shares``), our chart installed for that mode."""
    timings: dict[str, float] = {}
    stage = partial(cluster._stage, timings)
    built = stage("NVIDIA's plugin and the mock NVML built",
                  lambda: ensure_build(kind.settings, plugin_source, mock_source))  # fmt: skip
    tools = stage("build and start dockerd", lambda: cluster.prepare(kind))
    node_image = stage("node image", lambda: cluster.node_image_for(kind.settings, tools))
    stage("mock driver root laid out", lambda: driverroot.lay_out(mock_source, built.nvml))
    stage("cluster Ready",
          lambda: cluster.create_cluster(kind, node_image, mount_mock_root))  # fmt: skip
    stage("chart images built and loaded", lambda: cluster.load_images(kind))
    stage("HAMi examples' image loaded", lambda: load_hami_example_image(kind))
    stage("NVIDIA's plugin image built and loaded", lambda: load_plugin_image(kind, built))
    stage("NVIDIA's plugin publishing", lambda: install_plugin(kind, built, mode))
    stage("chart installed (nvidiaDriver), all pods Ready",
          lambda: cluster.install(kind, *chart_values(mode)))  # fmt: skip
    record = kind.settings.cache_root / "kind" / TIMINGS
    record.write_text(json.dumps(timings, indent=2) + "\n")
    return timings


def plugin_image(built: NvidiaBuild) -> str:
    return plugin.image_name(str(built.record["nvidia_dra_digest"]))


def load_plugin_image(kind: Kind, built: NvidiaBuild) -> None:
    image = plugin.build_image(kind.settings, built.plugin, plugin_image(built))
    run([str(kind.kind_binary), "load", "docker-image", image, "--name", kind.name],
        env=dockerd.docker_env())  # fmt: skip


def load_hami_example_image(kind: Kind) -> None:
    base = ensure_rootfs_image(kind.settings, "python")
    run(["docker", "tag", base, HAMI_EXAMPLE_IMAGE], env=dockerd.docker_env())
    run([str(kind.kind_binary), "load", "docker-image", HAMI_EXAMPLE_IMAGE, "--name", kind.name],
        env=dockerd.docker_env())  # fmt: skip


def install_plugin(kind: Kind, built: NvidiaBuild, mode: str) -> None:
    """NVIDIA's objects applied; the DaemonSet rolled out and its slice published."""
    manifest = kind.kubeconfig.parent / "nvidia.generated.yaml"
    manifest.write_text(
        yaml.safe_dump_all(plugin.manifests(plugin_image(built), mode), sort_keys=False)
    )
    run([*kind.kubectl, "apply", "--server-side", "--force-conflicts", f"--filename={manifest}"])
    rollout = ["rollout", "status", f"daemonset/{plugin.NAME}", "--timeout=180s"]
    run([*kind.kubectl, "--namespace", plugin.NAMESPACE, *rollout])
    api = KubeApi.connect(str(kind.kubeconfig), timeout_s=30)
    wait_for(partial(nvidia_devices, api), timeout_s=120, what="NVIDIA's slice", interval_s=1)


def nvidia_devices(api: KubeApi) -> list[Json] | None:
    """The devices of NVIDIA's slices, once they hold every mock card (else None)."""
    slices = api.list(
        "/apis/resource.k8s.io/v1/resourceslices", fieldSelector=f"spec.driver={plugin.DRIVER}"
    )["items"]
    devices: list[Json] = [d for s in slices for d in s["spec"].get("devices") or []]
    return devices if len(devices) >= driverroot.GPU_COUNT else None


def down(kind: Kind) -> host.Restored:
    """The kind tier's ``down``, then the host's mock driver root removed."""
    started = time.monotonic()
    restored = cluster.down(kind)
    if driverroot.remove():
        restored.changes.append(f"removed {driverroot.HOST_ROOT}")
    print(f"== down: {time.monotonic() - started:.1f}s", flush=True)
    return restored
