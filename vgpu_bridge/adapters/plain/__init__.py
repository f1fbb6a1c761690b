"""The plain adapter: kube-scheduler, or any DRA-aware scheduler with no quirks of its own."""

from vgpu_bridge.adapters.plain.adapter import PlainAdapter

__all__ = ["PlainAdapter"]
