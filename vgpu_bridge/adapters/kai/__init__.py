"""The KAI Scheduler adapter: its sharing annotations become DRA shares KAI can allocate."""

from vgpu_bridge.adapters.kai.adapter import KaiAdapter

__all__ = ["KaiAdapter"]
