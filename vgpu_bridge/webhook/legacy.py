"""Legacy HAMi in the same cluster: both modes must never manage the same GPUs."""

from __future__ import annotations

from vgpu_bridge.kube import KubeApi

HAMI_NODE_ANNOTATION = "hami.io/node-nvidia-register"  # written by HAMi's device plugin
HAMI_SCHEDULER_SELECTOR = "app.kubernetes.io/component=hami-scheduler"


def legacy_hami_warnings(api: KubeApi) -> list[str]:
    """Warnings naming the legacy HAMi parts found (nodes its device plugin registered, its
    scheduler's pods); [] when none."""
    warnings = []
    nodes = api.list("/api/v1/nodes").get("items", [])
    registered = sorted(
        n["metadata"]["name"]
        for n in nodes
        if HAMI_NODE_ANNOTATION in (n["metadata"].get("annotations") or {})
    )
    if registered:
        shown = ", ".join(registered[:3]) + ("…" if len(registered) > 3 else "")
        warnings.append(
            f"legacy HAMi's device plugin manages GPUs on nodes {shown}: do not let vgpu-bridge "
            "and legacy HAMi share GPUs"
        )
    schedulers = api.list("/api/v1/pods", labelSelector=HAMI_SCHEDULER_SELECTOR).get("items", [])
    if schedulers:
        warnings.append(
            "legacy hami-scheduler runs in this cluster: do not run both modes on the same GPUs"
        )
    return warnings
