"""Scheduler adapters: thin, scheduler-specific quirks on top of the pure core translator."""

from vgpu_bridge.adapters.base import SchedulerAdapter
from vgpu_bridge.adapters.registry import AdapterRegistry, default_registry

__all__ = ["AdapterRegistry", "SchedulerAdapter", "default_registry"]
