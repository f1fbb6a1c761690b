"""KAI's GPU accounting for DRA (kai.md §1.5), applied to what our webhook and the API server
really made: the rule is KAI's, the objects are ours, and no KAI binary is needed to apply it."""

from __future__ import annotations

from typing import Any

from e2e.cluster.client import Json


def is_gpu_class(device_class: str) -> bool:
    """KAI's `IsGPUDeviceClass`: the DeviceClass name contains "gpu", in any case."""
    return "gpu" in device_class.lower()


def claim_gpus(spec: Json) -> int:
    """The GPUs KAI counts a claim spec as, in quota, fair share and fit: each `exactly` request
    of a GPU class adds its count (1 when the count is unset or not positive, 1 for `All`);
    `firstAvailable` and other classes add 0."""
    total = 0
    for request in spec["devices"]["requests"]:
        exactly: dict[str, Any] | None = request.get("exactly")
        if exactly is None or not is_gpu_class(exactly["deviceClassName"]):
            continue
        count = int(exactly.get("count") or 0)
        all_devices = exactly.get("allocationMode") == "All"
        total += 1 if all_devices or count <= 0 else count
    return total


def node_gpus(slices: list[Json], node: str, *, driver: str | None = None) -> int:
    """The GPUs KAI adds to `node`'s allocatable: every device of the node's slices whose driver
    name contains "gpu" (only `driver`'s slices when given, to see what each driver adds)."""
    return sum(
        len(s["spec"].get("devices") or [])
        for s in slices
        if s["spec"].get("nodeName") == node
        and "gpu" in s["spec"]["driver"].lower()
        and driver in (None, s["spec"]["driver"])
    )
