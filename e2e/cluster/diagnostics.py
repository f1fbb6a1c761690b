"""What a failed e2e test leaves for its reader: objects, events and component logs.

``dump`` writes full JSON files into a directory and returns a short text summary that pytest
shows with the failure.
"""

from __future__ import annotations

import json
from pathlib import Path

from e2e.cluster.client import ApiError, Json, KubeClient
from e2e.cluster.controlplane import LocalCluster

RESOURCE = "/apis/resource.k8s.io/v1"
LOG_TAIL_LINES = 30


def dump(cluster: LocalCluster, namespace: str, dest: Path) -> str:
    client = cluster.client()
    dest.mkdir(parents=True, exist_ok=True)
    collections = {
        "pods": f"/api/v1/namespaces/{namespace}/pods",
        "resourceclaims": f"{RESOURCE}/namespaces/{namespace}/resourceclaims",
        "resourceclaimtemplates": f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
        "events": f"/api/v1/namespaces/{namespace}/events",
        "resourceslices": f"{RESOURCE}/resourceslices",
        "deviceclasses": f"{RESOURCE}/deviceclasses",
        "nodes": "/api/v1/nodes",
    }
    found = {name: _items(client, path) for name, path in collections.items()}
    for name, items in found.items():
        (dest / f"{name}.json").write_text(json.dumps(items, indent=2))
    lines = [f"== e2e dump of namespace {namespace} (full objects in {dest})"]
    lines += [_pod_line(pod) for pod in found["pods"]]
    lines += [_claim_line(claim) for claim in found["resourceclaims"]]
    lines += [_event_line(event) for event in found["events"]]
    for name, log in cluster.logs().items():
        tail = _tail(log)
        (dest / f"{name}.log").write_text(tail)
        lines.append(f"-- {name} log (last {LOG_TAIL_LINES} lines) --")
        lines += tail.splitlines()[-LOG_TAIL_LINES:]
    return "\n".join(lines)


def _items(client: KubeClient, path: str) -> list[Json]:
    try:
        return client.items(path)
    except (ApiError, OSError) as error:
        return [{"error": str(error)}]


def _pod_line(pod: Json) -> str:
    status = pod.get("status") or {}
    conditions = "; ".join(
        f"{c.get('type')}={c.get('status')} {c.get('reason', '')} {c.get('message', '')}".strip()
        for c in status.get("conditions") or []
    )
    name = pod.get("metadata", {}).get("name")
    node = pod.get("spec", {}).get("nodeName")
    return f"pod {name} phase={status.get('phase')} node={node} {conditions}"


def _claim_line(claim: Json) -> str:
    status = claim.get("status") or {}
    results = (status.get("allocation") or {}).get("devices", {}).get("results") or []
    shares = ", ".join(
        f"{r.get('device')} share={r.get('shareID')} consumed={r.get('consumedCapacity')}"
        for r in results
    )
    reserved = [entry.get("name") for entry in status.get("reservedFor") or []]
    name = claim.get("metadata", {}).get("name")
    return f"claim {name} allocated=[{shares}] reservedFor={reserved}"


def _event_line(event: Json) -> str:
    involved = event.get("involvedObject") or {}
    return (
        f"event {involved.get('kind')}/{involved.get('name')} {event.get('type')} "
        f"{event.get('reason')}: {event.get('message')}"
    )


def _tail(log: Path, lines: int = 400) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"(log unreadable: {error})"
