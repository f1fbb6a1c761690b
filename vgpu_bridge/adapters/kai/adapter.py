"""KAI's quirks on top of the core translation (kai.md §0, §1.4-§1.6, §4, §7).

- KAI's own sharing annotations (`gpu-fraction`, `gpu-memory`, `gpu-fraction-num-devices`, …)
  are translated and removed: KAI refuses its own sharing on nodes with DRA GPUs.
- Never `firstAvailable`: KAI counts such a request as 0 GPUs and its allocator may refuse it, so
  a fraction or percentage needs a cluster with one card size.
- Templates only (KAI's queue-label check applies to standalone claims, not to claims made from
  templates); the pod's queue label and schedulerName are left as they are.
- KAI honours capacity requests only in builds after v0.17.0 (its PR #2102): older ones hand every
  share a whole device, so the adapter warns, or refuses when told to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vgpu_bridge.core import FieldError, InvalidRequest, Plan, TranslationContext, translate
from vgpu_bridge.core.workloads import object_ref, pod_templates

QUEUE_LABEL = "kai.scheduler/queue"
LAST_WITHOUT_CAPACITY = (0, 17, 0)


def has_consumable_capacity(version: str) -> bool | None:
    """True for KAI builds after v0.17.0 (a later release, or `v0.17.0-N-g<sha>` from git
    describe), False for v0.17.0 and older, None when the text is not a version."""
    base, _, suffix = version.strip().lstrip("v").partition("-")
    try:
        major, minor, patch = (int(p) for p in base.split("."))
    except ValueError:
        return None
    release = (major, minor, patch)
    if release != LAST_WITHOUT_CAPACITY:
        return release > LAST_WITHOUT_CAPACITY
    commits = suffix.split("-")[0]
    return commits.isdigit() and int(commits) > 0  # v0.17.0-12-gabc: 12 commits after the tag


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
            f"KAI {self.version} ignores capacity requests (support came after v0.17.0): "
            "each GPU share would get a whole device; upgrade KAI"
        )
        if self.refuse_without_capacity:
            raise InvalidRequest(object_ref(obj), [FieldError("spec.schedulerName", reason)])
        return replace(plan, warnings=(*plan.warnings, reason))
