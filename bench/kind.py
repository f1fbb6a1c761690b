"""The kind tier's timings (``make bench``): time to a Ready 3-node cluster with the node image
built (cold) and reused (warm), chart install to all pods Ready, and apply-to-Running latency
(p50/p99) of 20 shared-GPU pods next to 20 pods without GPUs, created together on the same
cluster. Tears the cluster down and puts the host back after. Needs root; run under
``flock /tmp/vgpu-node-tier.lock`` (the Makefile does). Prints a table."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.cluster.settings import Settings
from e2e.kind.cluster import (
    Kind,
    create_cluster,
    down,
    install,
    load_images,
    node_image_for,
    prepare,
)
from e2e.kind.dockerd import docker_env
from e2e.kind.steps import run
from vgpu_bridge.kube import KubeApi

PODS = 20
POLL_S = 0.25


def pod(name: str, gpu: bool) -> dict[str, object]:
    container: dict[str, object] = {
        "name": "main",
        "image": "ubuntu:24.04",
        "command": ["sleep", "infinity"],
    }
    if gpu:
        limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000, "nvidia.com/gpucores": 10}
        container["resources"] = {"limits": limits}
    spec = {"terminationGracePeriodSeconds": 0, "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def apply_to_running(api: KubeApi) -> dict[str, list[float]]:
    """Create the 40 pods at once; seconds from each create until it is seen Running."""
    namespace = "bench-kind"
    api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
    )
    created: dict[str, float] = {}
    for index in range(PODS):
        for kind, gpu in (("gpu", True), ("plain", False)):
            name = f"{kind}-{index}"
            api.create(f"/api/v1/namespaces/{namespace}/pods", pod(name, gpu))
            created[name] = time.monotonic()
    running: dict[str, float] = {}
    deadline = time.monotonic() + 600
    while len(running) < len(created) and time.monotonic() < deadline:
        for item in api.list(f"/api/v1/namespaces/{namespace}/pods")["items"]:
            name = item["metadata"]["name"]
            if name not in running and item.get("status", {}).get("phase") == "Running":
                running[name] = time.monotonic() - created[name]
        time.sleep(POLL_S)
    if len(running) < len(created):
        raise SystemExit(f"bench/kind: only {len(running)}/{len(created)} pods Running in 600s")
    return {
        kind: sorted(s for name, s in running.items() if name.startswith(kind))
        for kind in ("gpu", "plain")
    }


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, round(fraction * (len(values) - 1)))]


def measure(kind: Kind) -> list[tuple[str, str]]:
    rows = []
    tools = prepare(kind)
    node_image = node_image_for(kind.settings, tools)
    run(["docker", "rmi", "-f", node_image], env=docker_env())
    started = time.monotonic()
    node_image = node_image_for(kind.settings, tools)
    create_cluster(kind, node_image)
    rows.append(
        ("cluster Ready, node image made again (cold)", f"{time.monotonic() - started:.0f} s")
    )
    started = time.monotonic()
    create_cluster(kind, node_image)  # deletes the first one
    rows.append(("cluster Ready, node image reused (warm)", f"{time.monotonic() - started:.0f} s"))
    load_images(kind)
    started = time.monotonic()
    install(kind)
    rows.append(("helm install to all pods Ready", f"{time.monotonic() - started:.0f} s"))
    latencies = apply_to_running(KubeApi.connect(str(kind.kubeconfig), timeout_s=30))
    for name, values in latencies.items():
        label = "shared-GPU pods" if name == "gpu" else "pods without GPUs"
        p50, p99 = statistics.median(values), percentile(values, 0.99)
        rows.append((f"{PODS} {label}: apply to Running p50 / p99", f"{p50:.1f} / {p99:.1f} s"))
    return rows


def main() -> int:
    kind = Kind.from_settings(Settings.from_env())
    try:
        rows = measure(kind)
    finally:
        down(kind)
    width = max(len(label) for label, _ in rows)
    print(f"{'kind tier (1 control plane + 2 workers, 2 mock GPUs each)':<{width}}  value")
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
