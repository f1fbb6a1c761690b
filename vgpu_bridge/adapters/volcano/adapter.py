"""Volcano's quirks on top of the core translation (volcano.md §0, §3, §4, §7).

- vcjobs are translated on CREATE *and* UPDATE at the task-template level: vc-controller computes
  the PodGroup's minResources from the templates and creates pods only once the gang is enqueued,
  so a pod-level translation alone would deadlock. The result is deterministic, so a re-applied
  Job is rewritten to exactly what Volcano already holds (it refuses other spec changes).
- Template names carry the job's name: a job's templates are its own.
- PodGroups lose translated keys in `minResources`.
- Before v1.15 Volcano ignores capacity requests: every share would get a whole device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vgpu_bridge.adapters.volcano.podgroup import strip_min_resources
from vgpu_bridge.core import Plan, TranslationContext, translate
from vgpu_bridge.core.claims import TEMPLATE_PREFIX
from vgpu_bridge.core.dialects import translated_resources
from vgpu_bridge.core.workloads import (
    VOLCANO_GROUP,
    VOLCANO_SCHEDULING_GROUP,
    api_group,
    pod_templates,
)

GANG_ANNOTATION = "scheduling.k8s.io/group-name"
JOB_LABEL = "volcano.sh/job-name"
FIRST_WITH_CAPACITY = (1, 15)


def _version(text: str) -> tuple[int, int] | None:
    parts = text.strip().lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class VolcanoAdapter:
    """`scheduler_names`: vc-scheduler's `--scheduler-name` values; `version`: the Volcano
    release in the cluster when known (e.g. `v1.15.1`)."""

    scheduler_names: Sequence[str] = ("volcano",)
    version: str | None = None
    name: str = "volcano"

    def recognises(self, obj: Mapping[str, Any]) -> bool:
        group, kind = api_group(obj), obj.get("kind")
        if (group, kind) in ((VOLCANO_GROUP, "Job"), (VOLCANO_SCHEDULING_GROUP, "PodGroup")):
            return True
        for template in pod_templates(obj):
            labels = (template.metadata or {}).get("labels") or {}
            if (
                template.spec.get("schedulerName") in self.scheduler_names
                or GANG_ANNOTATION in template.annotations
                or JOB_LABEL in labels
            ):
                return True
        return False

    def translate(self, obj: Mapping[str, Any], *, context: TranslationContext) -> Plan:
        group, kind = api_group(obj), obj.get("kind")
        if (group, kind) == (VOLCANO_SCHEDULING_GROUP, "PodGroup"):
            resources = translated_resources(context.config)
            return strip_min_resources(obj, adapter=self.name, resources=resources)
        prefix = TEMPLATE_PREFIX
        if (group, kind) == (VOLCANO_GROUP, "Job"):
            prefix = f"{TEMPLATE_PREFIX}{_job_name(obj)}-"
        plan = translate(obj, context=context, adapter=self.name, template_prefix=prefix)
        return self._version_warning(_best_effort_warnings(plan))

    def _version_warning(self, plan: Plan) -> Plan:
        version = _version(self.version) if self.version else None
        if not plan.changes_object or version is None or version >= FIRST_WITH_CAPACITY:
            return plan
        warning = (
            f"Volcano {self.version} ignores capacity requests (consumable capacity arrived in "
            "v1.15): each GPU share would get a whole device; upgrade Volcano"
        )
        return replace(plan, warnings=(*plan.warnings, warning))


def _asks_cpu_or_memory(spec: Mapping[str, Any]) -> bool:
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    for container in containers:
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            if {"cpu", "memory"} & set(resources.get(section) or {}):
                return True
    return False


def _best_effort_warnings(plan: Plan) -> Plan:
    """A translated template whose containers ask for no CPU or memory is best-effort to Volcano
    (claims are not requests): its allocate step skips such tasks and backfill binds them one by
    one, outside the gang. Under the device plugin, `nvidia.com/gpu` itself was the request.
    Translation leaves CPU and memory as they were, so the templates as given tell."""
    warnings = [
        f"{pod.template.spec_path}: no container asks for CPU or memory once its GPUs are "
        "claims, so Volcano treats the task as best-effort and may bind it outside its "
        "gang; give each container a CPU request (e.g. 100m)"
        for pod in plan.translated
        if not _asks_cpu_or_memory(pod.template.spec)
    ]
    return replace(plan, warnings=(*plan.warnings, *warnings)) if warnings else plan


def _job_name(job: Mapping[str, Any]) -> str:
    meta = job.get("metadata") or {}
    name = meta.get("name") or str(meta.get("generateName") or "job").rstrip("-")
    return str(name)[:63].rstrip("-")
