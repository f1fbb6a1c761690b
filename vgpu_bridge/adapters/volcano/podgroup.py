"""PodGroups: GPU keys in `spec.minResources` would block enqueue forever (volcano.md §3.4).

No node advertises `nvidia.com/gpu` once GPUs are DRA devices, so the overcommit and proportion
plugins see zero of it and never admit the gang; the pods that would carry the claims are never
created. User- or operator-made PodGroups therefore lose the translated keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_bridge.core import Plan
from vgpu_bridge.core.jsonpatch import escape
from vgpu_bridge.core.workloads import object_ref

# ResourceList keys may also carry quota-style prefixes (`requests.nvidia.com/gpu`).
_PREFIXES = ("", "requests.", "limits.")


def _translated(key: str, resources: frozenset[str]) -> bool:
    return any(key.startswith(p) and key[len(p) :] in resources for p in _PREFIXES)


def strip_min_resources(
    podgroup: Mapping[str, Any], *, adapter: str, resources: frozenset[str]
) -> Plan:
    """A plan removing every key of `resources` (the translated ones) from `spec.minResources`;
    empty when none is there."""
    spec = podgroup.get("spec")
    minimum = spec.get("minResources") if isinstance(spec, Mapping) else None
    if not isinstance(minimum, Mapping):
        return Plan(object_ref=object_ref(podgroup), adapter=adapter)
    keys = sorted(k for k in minimum if _translated(k, resources))
    ops = [{"op": "remove", "path": f"/spec/minResources/{escape(k)}"} for k in keys]
    warnings = (
        (
            f"spec.minResources: removed {', '.join(keys)}: GPU shares are DRA claims, which no "
            "node advertises as extended resources; left in, the gang would never be enqueued",
        )
        if keys
        else ()
    )
    return Plan(
        object_ref=object_ref(podgroup), adapter=adapter, patch=tuple(ops), warnings=warnings
    )
