"""The webhook's API client now lives in `vgpu_bridge.kube`, shared with the node agent."""

from vgpu_bridge.kube import MERGE_PATCH, TRANSIENT_STATUS, Json, KubeApi, KubeError

__all__ = ["MERGE_PATCH", "TRANSIENT_STATUS", "Json", "KubeApi", "KubeError"]
