"""The fast path for the many pods that ask for no GPU: a look at their annotation and resource
keys instead of a translation. It only ever says "cannot ask" for a Pod none of whose keys starts
like a name the translator reads (the chart's CEL matchConditions test the same prefixes); any
other object, or anything unusual, takes the full path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: every resource and annotation name the translator reads starts with one of these
GPU_KEY_PREFIXES = ("nvidia.com/", "volcano.sh/vgpu", "hami.io/", "gpu-fraction", "gpu-memory")


def may_ask_for_gpus(kind: str, obj: Mapping[str, Any]) -> bool:
    """False only for a Pod that certainly asks for nothing we translate, refuse or warn about."""
    if kind != "Pod":
        return True
    metadata, spec = obj.get("metadata"), obj.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return True
    if _any_gpu_key(metadata.get("annotations")):
        return True
    for field in ("containers", "initContainers"):
        containers = spec.get(field)
        if containers is None:
            continue
        if not isinstance(containers, list):
            return True
        for container in containers:
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if resources is not None and not isinstance(resources, Mapping):
                return True
            resources = resources or {}
            if _any_gpu_key(resources.get("limits")) or _any_gpu_key(resources.get("requests")):
                return True
    return False


def _any_gpu_key(section: object) -> bool:
    if section is None:
        return False
    if not isinstance(section, Mapping):
        return True  # not a map: the full path says what is wrong with it
    return any(not isinstance(k, str) or k.startswith(GPU_KEY_PREFIXES) for k in section)
