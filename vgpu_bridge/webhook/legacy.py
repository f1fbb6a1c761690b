"""Legacy HAMi in the same cluster: both modes must never manage the same GPUs. During a move
node pool by node pool (docs/migration.md) they run side by side on separate pools, and every
translated admission carries these warnings until HAMi is gone."""

from __future__ import annotations

from vgpu_bridge.kube import KubeApi

HAMI_NODE_ANNOTATION = "hami.io/node-nvidia-register"  # written by HAMi's device plugin
HAMI_SCHEDULER_SELECTOR = "app.kubernetes.io/component=hami-scheduler"
RECIPE = "docs/migration.md"
SHOWN_NODES = 3


def legacy_hami_warnings(api: KubeApi) -> list[str]:
    """Warnings naming the legacy HAMi parts found (nodes its device plugin registered, its
    scheduler's pods) and the recipe to follow; [] when none."""
    warnings = []
    nodes = api.list_all("/api/v1/nodes").items  # paged: a fleet has thousands
    registered = sorted(
        n["metadata"]["name"]
        for n in nodes
        if HAMI_NODE_ANNOTATION in (n["metadata"].get("annotations") or {})
    )
    if registered:
        shown = ", ".join(registered[:SHOWN_NODES]) + ("…" if len(registered) > SHOWN_NODES else "")
        warnings.append(
            f"legacy HAMi's device plugin manages GPUs on nodes {shown}: never run vgpu-bridge's "
            "agent there; keep HAMi on a legacy node pool and move pool by pool as "
            f"{RECIPE} says"
        )
    schedulers = api.list_all("/api/v1/pods", labelSelector=HAMI_SCHEDULER_SELECTOR).items
    if schedulers:
        warnings.append(
            "legacy hami-scheduler runs in this cluster: keep HAMi and vgpu-bridge on separate "
            f"node pools and move pool by pool as {RECIPE} says"
        )
    return warnings
