"""`vgpu-bridge status` (also `kubectl vgpu status`): which pods share which card, how much each
booked and uses, and which pods wait for their claims.

`report.build_report` is pure (API objects and metrics samples in, a `Report` out) and `render`
prints it; `command` is the thin I/O shell that reads the objects through `vgpu_bridge.kube`.
"""

from vgpu_bridge.status.model import Card, PendingPod, Report, Share
from vgpu_bridge.status.report import build_report

__all__ = ["Card", "PendingPod", "Report", "Share", "build_report"]
