"""The shape of what core reads: a map where a map belongs, a list where a list belongs, strings
where strings belong, and no deeper nesting than any workload needs. Checked before anything reads
an object, so a wrong type is a denial naming the field, never a crash. So is a list longer than
any real pod needs (containers, claims, env entries): the work an object costs stays bounded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_bridge.core.errors import FieldError, InvalidRequest
from vgpu_bridge.core.models import Problems
from vgpu_bridge.core.workloads import (
    CONTAINER_LISTS,
    VOLCANO_GROUP,
    api_group,
    object_ref,
    template_path,
)

MAX_DEPTH = 64  # a Pod nests about 10 levels, a Volcano Job about 15
# Far above any real pod (Kubernetes sets no such limit; etcd's 1.5 MiB bounds a pod at a few
# thousand containers), far below what turns one review into seconds of work (issue 25).
MAX_CONTAINERS = 256  # per pod: containers and initContainers together
MAX_POD_CLAIMS = 128  # spec.resourceClaims of one pod
MAX_CONTAINER_CLAIMS = 128  # resources.claims of one container
MAX_ENV = 1024  # env entries of one container
_STRING_MAPS = ("labels", "annotations")
_TYPE_NAMES: dict[type, str] = {Mapping: "a map", list: "a list", str: "a string"}


def deeper_than(value: object, limit: int = MAX_DEPTH) -> bool:
    """True when maps and lists in `value` nest more than `limit` levels (walked without
    recursion, so any depth is safe to ask about)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, Mapping | list):
            continue
        if depth > limit:
            return True
        children = node.values() if isinstance(node, Mapping) else node
        stack.extend((child, depth + 1) for child in children)
    return False


def check_shape(obj: object) -> None:
    """Raise `InvalidRequest` naming every field of the wrong type that core would read."""
    if not isinstance(obj, Mapping):
        raise InvalidRequest("object", [FieldError("(root)", "must be a map")])
    problems = Problems()
    _metadata(obj.get("metadata"), "metadata", problems)
    for spec, path in _pod_specs(obj, problems):
        _pod_spec(spec, path, problems)
    if problems:
        raise InvalidRequest(object_ref(obj), problems.errors)


def _kind(
    value: object, expected: type, path: str, problems: Problems, *, optional: bool = True
) -> bool:
    """True when `value` is of the expected type, or absent (None) where that is allowed; else
    record the problem."""
    if (value is None and optional) or isinstance(value, expected):
        return True
    problems.add(path, f"must be {_TYPE_NAMES[expected]}, got {type(value).__name__}")
    return False


def _metadata(meta: object, path: str, problems: Problems) -> None:
    if not _kind(meta, Mapping, path, problems) or meta is None:
        return
    assert isinstance(meta, Mapping)
    for key in ("name", "generateName", "namespace"):
        _kind(meta.get(key), str, f"{path}.{key}", problems)
    for key in _STRING_MAPS:
        entries = meta.get(key)
        if _kind(entries, Mapping, f"{path}.{key}", problems) and entries is not None:
            for name, value in entries.items():
                if not isinstance(value, str):  # the path made only for a problem: many labels
                    _kind(value, str, f"{path}.{key}[{name}]", problems)


def _pod_specs(obj: Mapping[str, Any], problems: Problems) -> list[tuple[Mapping[str, Any], str]]:
    """(pod spec, its path) of every pod template, after checking each hop on the way there."""
    if (api_group(obj), obj.get("kind")) == (VOLCANO_GROUP, "Job"):
        return _volcano_specs(obj, problems)
    path = template_path(obj)
    if path is None:
        return []
    node: object = obj
    dotted = ""
    for key in path:
        dotted = f"{dotted}.{key}" if dotted else str(key)
        node = node.get(key) if isinstance(node, Mapping) else None
        if not _kind(node, Mapping, dotted, problems) or node is None:
            return []
    assert isinstance(node, Mapping)
    return _template(node, dotted, problems)


def _template(node: Mapping[str, Any], path: str, problems: Problems) -> list[tuple[Any, str]]:
    """A pod template's metadata checked; its spec returned when it is a map. A Pod is its own
    template (path "")."""
    prefix = f"{path}." if path else ""
    if path:
        _metadata(node.get("metadata"), f"{prefix}metadata", problems)
    spec = node.get("spec")
    if not _kind(spec, Mapping, f"{prefix}spec", problems) or spec is None:
        return []
    return [(spec, f"{prefix}spec")]


def _volcano_specs(obj: Mapping[str, Any], problems: Problems) -> list[tuple[Any, str]]:
    spec = obj.get("spec")
    if not _kind(spec, Mapping, "spec", problems) or spec is None:
        return []
    tasks = spec.get("tasks")
    if not _kind(tasks, list, "spec.tasks", problems) or tasks is None:
        return []
    found = []
    for index, task in enumerate(tasks):
        path = f"spec.tasks[{index}]"
        if not _kind(task, Mapping, path, problems, optional=False):
            continue
        template = task.get("template")
        if _kind(template, Mapping, f"{path}.template", problems) and template is not None:
            found += _template(template, f"{path}.template", problems)
    return found


def _pod_spec(spec: Mapping[str, Any], path: str, problems: Problems) -> None:
    _kind(spec.get("schedulerName"), str, f"{path}.schedulerName", problems)
    if _too_many_containers(spec, path, problems):
        return  # not worth reading further
    for list_name in CONTAINER_LISTS:
        for item, item_path in _maps(spec.get(list_name), f"{path}.{list_name}", problems):
            _container(item, item_path, problems)
    claims = spec.get("resourceClaims")
    if claims is None or _too_long(
        claims, MAX_POD_CLAIMS, "claims per pod", path, "resourceClaims", problems
    ):
        return
    for claim, claim_path in _maps(claims, f"{path}.resourceClaims", problems):
        for key in ("name", "resourceClaimName", "resourceClaimTemplateName"):
            _kind(claim.get(key), str, f"{claim_path}.{key}", problems)


def _maps(value: object, path: str, problems: Problems) -> list[tuple[Mapping[str, Any], str]]:
    """The items of a list of maps, each with its path; wrong types recorded and skipped."""
    if not _kind(value, list, path, problems) or value is None:
        return []
    assert isinstance(value, list)
    found = []
    for index, item in enumerate(value):
        if _kind(item, Mapping, f"{path}[{index}]", problems, optional=False):
            found.append((item, f"{path}[{index}]"))
    return found


def _too_many_containers(spec: Mapping[str, Any], path: str, problems: Problems) -> bool:
    """Records the list that takes a pod past MAX_CONTAINERS (initContainers are counted
    first); True when one does."""
    count = 0
    for list_name in CONTAINER_LISTS:
        items = spec.get(list_name)
        count += len(items) if isinstance(items, list) else 0
        if count > MAX_CONTAINERS:
            problems.add(
                f"{path}.{list_name}",
                f"a pod may have at most {MAX_CONTAINERS} containers and initContainers "
                f"together, got {count} or more",
            )
            return True
    return False


def _too_long(
    value: object, limit: int, what: str, path: str, key: str, problems: Problems
) -> bool:
    """Records a list at `path`.`key` longer than `limit`; True when it is. The path is made
    only for a problem: most lists are short, and every container has some."""
    if isinstance(value, list) and len(value) > limit:
        problems.add(f"{path}.{key}", f"at most {limit} {what}, got {len(value)}")
        return True
    return False


def _container(container: Mapping[str, Any], path: str, problems: Problems) -> None:
    """Its fields' paths are made only for a problem: every pod's containers pass here."""
    if not isinstance(name := container.get("name"), str | None):
        _kind(name, str, f"{path}.name", problems)
    _too_long(container.get("env"), MAX_ENV, "env entries per container", path, "env", problems)
    resources = container.get("resources")
    if resources is None:
        return
    if not isinstance(resources, Mapping):
        _kind(resources, Mapping, f"{path}.resources", problems)
        return
    for section in ("limits", "requests"):
        if not isinstance(value := resources.get(section), Mapping | None):
            _kind(value, Mapping, f"{path}.resources.{section}", problems)
    claims = resources.get("claims")
    if claims is None:
        return
    what = "claims per container"
    if not _too_long(claims, MAX_CONTAINER_CLAIMS, what, path, "resources.claims", problems):
        _maps(claims, f"{path}.resources.claims", problems)
