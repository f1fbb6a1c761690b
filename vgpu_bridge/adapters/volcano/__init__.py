"""The Volcano adapter: vcjobs translated at the task-template level, PodGroups kept enqueueable."""

from vgpu_bridge.adapters.volcano.adapter import VolcanoAdapter

__all__ = ["VolcanoAdapter"]
