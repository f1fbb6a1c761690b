"""A realistic mix of workloads for the benchmarks: mostly HAMi shares, some whole cards,
percentages, device choice, init containers, Volcano and KAI, and pods that ask for no GPU."""

from __future__ import annotations

import random
from typing import Any

from vgpu_bridge.core import Inventory

INVENTORY = Inventory({"gpu.vgpu-bridge.io": frozenset({40 * 2**30, 80 * 2**30, 141 * 2**30})})

_SHAPES: list[tuple[int, dict[str, Any], dict[str, str]]] = [
    # (weight, limits, annotations)
    (30, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}, {}),
    (15, {"nvidia.com/gpumem": 8000}, {}),
    (10, {"nvidia.com/gpu": 2}, {}),
    (10, {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 25}, {}),
    (5, {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}, {"nvidia.com/use-gputype": "A100,H100"}),
    (5, {"nvidia.com/gpu": 1}, {"nvidia.com/nouse-gpuuuid": "GPU-1,GPU-2"}),
    (5, {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 2048}, {}),
    (5, {}, {"gpu-fraction": "0.5"}),
    (15, {"cpu": "2", "memory": "4Gi"}, {}),
]


def _pod_spec(rng: random.Random, limits: dict[str, Any]) -> dict[str, Any]:
    main = {"name": "main", "image": "cuda:12", "resources": {"limits": {"cpu": "1", **limits}}}
    sidecar = {"name": "log", "image": "busybox", "resources": {"limits": {"cpu": "100m"}}}
    spec: dict[str, Any] = {"containers": [main, sidecar]}
    if rng.random() < 0.1 and "nvidia.com/gpu" in limits:
        init = {
            "name": "warm",
            "image": "cuda:12",
            "resources": {"limits": {"nvidia.com/gpumem": 500}},
        }
        spec["initContainers"] = [init]
    return spec


def make_workloads(count: int, *, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    weights = [w for w, _, _ in _SHAPES]
    out = []
    for i in range(count):
        _, limits, annotations = rng.choices(_SHAPES, weights)[0]
        meta = {"name": f"w{i}", "namespace": f"team-{i % 7}", "annotations": dict(annotations)}
        spec = _pod_spec(rng, limits)
        if rng.random() < 0.5:
            out.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
        else:
            template = {"metadata": {"annotations": meta.pop("annotations")}, "spec": spec}
            body = {"replicas": 2, "template": template}
            out.append(
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": body}
            )
    return out
