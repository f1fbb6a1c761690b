"""Objects recorded from the real control plane (e2e/node/test_status.py's packing: the agent's
mock H100 80Gi gpu-0 and A100 40Gi gpu-1 on one node; infer-a 30000Mi/30%/priority 0 and infer-b
40000Mi/50% on gpu-0, train 20000Mi/40%/priority 1 on gpu-1, too-big 60000Mi pending, all in
NAMESPACE; neighbour 1000Mi/5% on gpu-0 in OTHER), and that agent's /metrics. Read fresh for
each test: tests may change their copy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("data")
NODE = "e2e-agent-9d09d5"
NAMESPACE = "test-record-0ddc6f"
OTHER = "status-other-7f9ada"
GiB, MiB = 2**30, 2**20
Json = dict[str, Any]


def recorded(name: str) -> list[Json]:
    """`slices`, `claims` or `pods`, as the API server listed them (managedFields left out)."""
    items: list[Json] = json.loads((DATA / f"{name}.json").read_text())
    return items


def in_namespace(items: list[Json], namespace: str) -> list[Json]:
    return [item for item in items if item["metadata"]["namespace"] == namespace]


def agent_metrics() -> str:
    """The agent's /metrics while the pods ran (no CUDA process: no used-memory samples)."""
    return (DATA / "agent-metrics.txt").read_text()


def claim_uid(pod: str) -> str:
    (claim,) = [c for c in recorded("claims") if c["metadata"]["ownerReferences"][0]["name"] == pod]
    uid: str = claim["metadata"]["uid"]
    return uid
