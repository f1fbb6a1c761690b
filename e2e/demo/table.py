"""What each demo workload got, as rows and a printed table (pure: objects in, text out)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
#: The CDI env vars that carry a share's limits to libvgpu.so.
LIMIT_PREFIXES = ("CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT", "CUDA_TASK_PRIORITY")
HEADER = (
    "workload",
    "scheduler",
    "node",
    "device",
    "memory",
    "cores",
    "limits the CDI spec injects",
)


@dataclass(frozen=True)
class Row:
    workload: str
    scheduler: str
    node: str
    device: str
    memory: str
    cores: str
    limits: str

    def cells(self) -> tuple[str, ...]:
        return (
            self.workload, self.scheduler, self.node, self.device,
            self.memory, self.cores, self.limits,
        )  # fmt: skip


def workload_of(pod: Json) -> str:
    """``Deployment/x`` for a Deployment's pod, ``vcjob/x`` for a Volcano Job's, else ``Pod/x``."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    if "volcano.sh/job-name" in labels:
        return f"vcjob/{labels['volcano.sh/job-name']}"
    for owner in meta.get("ownerReferences") or ():
        if owner["kind"] == "ReplicaSet":
            deployment = owner["name"].rsplit("-", 1)[0]
            return f"Deployment/{deployment}"
        return f"{owner['kind']}/{owner['name']}"
    return f"Pod/{meta['name']}"


def cdi_limits(spec: Json | None) -> str:
    """The limit variables of a claim's CDI spec, in order; ``-`` when there is no spec."""
    if spec is None:
        return "-"
    env: list[str] = []
    for device in spec.get("devices") or ():
        env += (device.get("containerEdits") or {}).get("env") or []
    env += (spec.get("containerEdits") or {}).get("env") or []
    limits = [var for var in env if var.startswith(LIMIT_PREFIXES)]
    return " ".join(dict.fromkeys(limits)) or "-"


def visible_uuids(spec: Json | None) -> list[str]:
    """The GPU uuids a claim's CDI spec makes visible, in allocation order."""
    env: list[str] = ((spec or {}).get("containerEdits") or {}).get("env") or []
    for var in env:
        if var.startswith("NVIDIA_VISIBLE_DEVICES="):
            return var.split("=", 1)[1].split(",")
    return []


def pending_reason(pod: Json) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition["type"] == "PodScheduled" and condition["status"] != "True":
            return f"pending: {condition.get('message') or condition.get('reason', '')}"[:60]
    return "pending"


def rows_for_pod(
    pod: Json,
    claims: Mapping[str, Json],
    spec_of: Callable[[str, str], Json | None],
    *,
    note: str = "",
) -> list[Row]:
    """One row per allocated share of ``pod``; ``claims`` by name, ``spec_of(node, claim uid)``."""
    workload, scheduler = workload_of(pod), pod["spec"].get("schedulerName", "default-scheduler")
    node = pod["spec"].get("nodeName")
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    rows = []
    for status in statuses:
        claim = claims.get(status.get("resourceClaimName") or "")
        allocation = ((claim or {}).get("status") or {}).get("allocation")
        if claim is None or allocation is None or not node:
            continue
        spec = spec_of(node, claim["metadata"]["uid"])
        uuids = visible_uuids(spec)
        for index, result in enumerate(allocation["devices"]["results"]):
            consumed = result.get("consumedCapacity") or {}
            uuid = f" ({uuids[index]})" if index < len(uuids) else ""
            rows.append(
                Row(
                    workload,
                    scheduler,
                    node,
                    result["device"] + uuid,
                    consumed.get("memory", "whole"),
                    consumed.get("cores", "whole"),
                    cdi_limits(spec),
                )
            )
    if not rows:
        where = note or (pending_reason(pod) if not node else "no claim allocated")
        rows.append(Row(workload, scheduler, node or "-", "-", "-", "-", where))
    return rows


def render(rows: Iterable[Row]) -> str:
    """A plain-text table with a header and aligned columns."""
    table = [HEADER, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
