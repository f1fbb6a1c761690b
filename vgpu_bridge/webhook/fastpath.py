"""The fast path for the many pods that ask for no GPU: a look at their annotation and resource
keys instead of a translation. It only ever says "cannot ask" for a Pod none of whose keys starts
like a name the translator reads, or is one of the resource names the cluster renamed HAMi's to
(the chart's CEL matchConditions test the same prefixes and the same settings); any other object,
or anything unusual, takes the full path."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from vgpu_bridge.core.workloads import (
    CONTAINER_LISTS,
    api_group,
    container_count,
    pod_templates,
)

#: every resource and annotation name the translator reads starts with one of these
GPU_KEY_PREFIXES = ("nvidia.com/", "volcano.sh/vgpu", "hami.io/", "gpu-fraction", "gpu-memory")
GPU_KEY_MARKERS = tuple(prefix.encode() for prefix in GPU_KEY_PREFIXES)
#: the most containers a review answered on the selector thread may have (a pod without GPUs has
#: a handful); more, and it waits for a worker like any review that takes time
QUICK_MAX_CONTAINERS = 64


def may_ask_for_gpus(
    kind: str, obj: Mapping[str, Any], *, resource_names: Collection[str] = ()
) -> bool:
    """False only for a Pod that certainly asks for nothing we translate, refuse or warn about.
    `resource_names`: HAMi's resource names as configured, which may lie outside the prefixes
    (`resourceCountName: example.com/vgpu`), best made a frozenset once by the caller."""
    names = resource_names if isinstance(resource_names, frozenset) else frozenset(resource_names)
    if kind != "Pod":
        return True
    metadata, spec = obj.get("metadata"), obj.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return True
    if _any_gpu_key(metadata.get("annotations"), names):
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
            limits, requests = resources.get("limits"), resources.get("requests")
            if _any_gpu_key(limits, names) or _any_gpu_key(requests, names):
                return True
    return False


def quick_sized(obj: Mapping[str, Any]) -> bool:
    """Whether an object has few enough containers to be looked at on the selector thread:
    those of all its pod templates (a Volcano Job's tasks given up at once when they alone are
    more than QUICK_MAX_CONTAINERS). A Pod's are counted where they are, with no template made."""
    spec = obj.get("spec")
    if obj.get("kind") == "Pod" and api_group(obj) == "":
        return not isinstance(spec, Mapping) or container_count(spec) <= QUICK_MAX_CONTAINERS
    tasks = spec.get("tasks") if isinstance(spec, Mapping) else None
    if isinstance(tasks, list) and len(tasks) > QUICK_MAX_CONTAINERS:
        return False
    count = 0
    for template in pod_templates(obj):
        count += container_count(template.spec)
        if count > QUICK_MAX_CONTAINERS:
            return False
    return True


def lists_resource(pod: Mapping[str, Any], names: Collection[str]) -> bool:
    """Whether a container or init container of `pod` lists one of `names` in its limits or
    requests, or has a section of a type that cannot be looked at (a cheap look before sizing
    what it asks: a pod naming none of them asks for none)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return False
    for field in CONTAINER_LISTS:
        containers = spec.get(field)
        for container in containers if isinstance(containers, list) else ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for section in (resources.get("limits"), resources.get("requests")):
                if section is not None and (
                    not isinstance(section, Mapping) or any(n in section for n in names)
                ):
                    return True
    return False


def gpu_key_markers(resource_names: Collection[str] = ()) -> tuple[bytes, ...]:
    """The bytes a GPU key starts with, and the renamed resource names: made once, looked for in
    every review's raw bytes (`may_name_gpus`). A name that starts with a prefix is found by the
    prefix's marker: no scan of its own (HAMi's default names all start with `nvidia.com/`)."""
    renamed = (n for n in dict.fromkeys(resource_names) if not n.startswith(GPU_KEY_PREFIXES))
    return (*GPU_KEY_MARKERS, *(name.encode() for name in renamed))


def may_name_gpus(body: bytes, *, markers: tuple[bytes, ...] = GPU_KEY_MARKERS) -> bool:
    """False when the raw review holds none of `markers` (`gpu_key_markers`): a cheap look
    before reading it. Only a shortcut: a key written with JSON escapes is not seen here, and
    `may_ask_for_gpus` on the parsed object still sees it."""
    return any(marker in body for marker in markers)


def _any_gpu_key(section: object, names: frozenset[str]) -> bool:
    if section is None:
        return False
    if not isinstance(section, Mapping):
        return True  # not a map: the full path says what is wrong with it
    return any(
        not isinstance(k, str) or k.startswith(GPU_KEY_PREFIXES) or k in names for k in section
    )
