"""KAI's quirks on top of the core translation (kai.md §0, §1.4-§1.6, §4, §7).

- KAI's own sharing annotations (`gpu-fraction`, `gpu-memory`, `gpu-fraction-num-devices`, …)
  are translated and removed: KAI refuses its own sharing on nodes with DRA GPUs.
- Never `firstAvailable`: KAI counts such a request as 0 GPUs and its allocator may refuse it, so
  a fraction or percentage needs a cluster with one card size.
- Templates only (KAI's queue-label check applies to standalone claims, not to claims made from
  templates); the pod's queue label and schedulerName are left as they are.
- KAI honours capacity requests only in builds with its PR #2102 (after v0.17.0): older ones
  allocate no share of a shareable device (our DeviceClass takes only those, so the pod stays
  unschedulable), so the adapter warns, or refuses when told to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vgpu_bridge.core import FieldError, InvalidRequest, Plan, TranslationContext, translate
from vgpu_bridge.core.workloads import object_ref, pod_templates

QUEUE_LABEL = "kai.scheduler/queue"
LAST_WITHOUT_CAPACITY = (0, 17, 0)
FIX_MERGED = "20260825"  # KAI PR #2102, the day main gained consumable capacity
# Go's pseudo-versions (golang.org/x/mod/module, pseudoVersionRE), the date in group 1:
# `vX.0.0-yyyymmddhhmmss-sha` when no tag precedes the commit, `vX.Y.Z-pre.0.yyyymmddhhmmss-sha`
# after the pre-release tag vX.Y.Z-pre, `vX.Y.(Z+1)-0.yyyymmddhhmmss-sha` after the tag vX.Y.Z.
_PSEUDO = re.compile(
    r"^v?\d+\.(?:0\.0-|\d+\.\d+-(?:[^+]*\.)?0\.)(\d{8})\d{6}-[0-9A-Za-z]+(?:\+[0-9A-Za-z.-]+)?$"
)


def has_consumable_capacity(version: str) -> bool | None:
    """True for KAI builds with PR #2102, False for builds without it, None when the text does not
    tell (not a version, or `git describe` output such as `v0.17.0-12-gabc`, which does not say
    whether those commits include the fix). A Go pseudo-version names a build of main: its
    commit's date tells."""
    pseudo = _PSEUDO.match(version.strip())
    if pseudo:
        return pseudo.group(1) >= FIX_MERGED
    base, _, suffix = version.strip().lstrip("v").partition("-")
    try:
        major, minor, patch = (int(p) for p in base.split("."))
    except ValueError:
        return None
    if suffix and suffix.split("-")[0].isdigit():
        return None
    return (major, minor, patch) > LAST_WITHOUT_CAPACITY


@dataclass(frozen=True)
class KaiAdapter:
    """`version`: the KAI build in the cluster when known; `refuse_without_capacity`: refuse
    rather than warn when that build would hand out whole devices."""

    scheduler_names: Sequence[str] = ("kai-scheduler",)
    version: str | None = None
    refuse_without_capacity: bool = False
    name: str = "kai"

    def recognises(self, obj: Mapping[str, Any]) -> bool:
        for template in pod_templates(obj):
            labels = (template.metadata or {}).get("labels") or {}
            if template.spec.get("schedulerName") in self.scheduler_names or QUEUE_LABEL in labels:
                return True
        return False

    def translate(self, obj: Mapping[str, Any], *, context: TranslationContext) -> Plan:
        plan = translate(obj, context=context, adapter=self.name, first_available=False)
        if not plan.changes_object or self.version is None:
            return plan
        if has_consumable_capacity(self.version) is not False:
            return plan
        reason = (
            f"KAI {self.version} allocates without consumable capacity (it came after v0.17.0): "
            "a claim for a shareable GPU share stays unschedulable there (with a DeviceClass "
            "that also takes unshared devices, it would get a whole device); upgrade KAI"
        )
        if self.refuse_without_capacity:
            raise InvalidRequest(object_ref(obj), [FieldError("spec.schedulerName", reason)])
        return replace(plan, warnings=(*plan.warnings, reason))
