"""Device health: an unhealthy card gets a DRA device taint in our ResourceSlice, so the scheduler
places no new share on it; the taint goes when the card is healthy again.

A source says which cards are unhealthy now (`HealthSource`): NVML's XID events and lost GPUs on a
real node (`nvml_source`), per-card files under the agent's state dir with mock GPUs
(`mock_source`). `xids` decides which XIDs count; `watcher` turns the source's answer into taints
and republishes the slices when they change; `metrics` exports each card's health.
"""

from vgpu_bridge.node.device_health.watcher import DeviceHealthWatcher, HealthSource, taint_key

__all__ = ["DeviceHealthWatcher", "HealthSource", "taint_key"]
