"""The kinds of workload we translate or look into, in one table, and where their pod templates sit.

The webhook's template sweeper lists the kinds that hold pod templates; the chart's webhook rules
and its RBAC are held against this table by `e2e/chart/test_workload_kinds.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

VOLCANO_GROUP = "batch.volcano.sh"
#: a pod spec's container lists, init containers first (the order they run in)
CONTAINER_LISTS = ("initContainers", "containers")
VOLCANO_SCHEDULING_GROUP = "scheduling.volcano.sh"


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """One kind of object: its API coordinates, its pod template(s), whether the webhook sees it."""

    group: str
    version: str
    kind: str
    resource: str  # its plural, as API paths and RBAC rules name it
    template_path: tuple[str | int, ...] | None  # () for a Pod; None: none, or one per task
    holds_pod_templates: bool  # so its objects may reference our claim templates
    sent_to_webhook: bool  # the chart's MutatingWebhookConfiguration sends it to us

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_prefix(self) -> str:
        """Where its group's API is served: `/api/v1` or `/apis/<group>/<version>`."""
        return f"/apis/{self.api_version}" if self.group else f"/api/{self.version}"


def _kind(group: str, version: str, kind: str, path: tuple[str | int, ...] | None) -> WorkloadKind:
    """A kind whose plural is its lower-case name + s, that holds pod templates and is sent."""
    return WorkloadKind(
        group, version, kind, kind.lower() + "s", path, holds_pod_templates=True,
        sent_to_webhook=True,
    )  # fmt: skip


_TEMPLATE = ("spec", "template")
WORKLOAD_KINDS = (
    _kind("", "v1", "Pod", ()),
    # not sent: the pods it creates are translated one by one, as they are created
    WorkloadKind(
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        _TEMPLATE,
        holds_pod_templates=True,
        sent_to_webhook=False,
    ),
    _kind("apps", "v1", "Deployment", _TEMPLATE),
    _kind("apps", "v1", "ReplicaSet", _TEMPLATE),
    _kind("apps", "v1", "StatefulSet", _TEMPLATE),
    _kind("apps", "v1", "DaemonSet", _TEMPLATE),
    _kind("batch", "v1", "Job", _TEMPLATE),
    _kind("batch", "v1", "CronJob", ("spec", "jobTemplate", "spec", "template")),
    _kind(VOLCANO_GROUP, "v1alpha1", "Job", None),  # one template per task: spec.tasks[i].template
    # no pod template: the Volcano adapter strips GPU keys from its minResources
    WorkloadKind(
        VOLCANO_SCHEDULING_GROUP,
        "v1beta1",
        "PodGroup",
        "podgroups",
        None,
        holds_pod_templates=False,
        sent_to_webhook=True,
    ),
)
_BY_GROUP_KIND = {(k.group, k.kind): k for k in WORKLOAD_KINDS}


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """A pod spec and its metadata inside an object, with both addressing schemes we need:
    JSON pointers for the patch and dotted paths for error messages."""

    spec: Mapping[str, Any]
    metadata: Mapping[str, Any] | None
    spec_pointer: str
    metadata_pointer: str
    spec_path: str
    metadata_path: str

    @property
    def annotations(self) -> Mapping[str, Any]:
        value = (self.metadata or {}).get("annotations")
        return value if isinstance(value, Mapping) else {}


def api_group(obj: Mapping[str, Any]) -> str:
    api_version = str(obj.get("apiVersion", ""))
    return api_version.rpartition("/")[0]


def object_ref(obj: Mapping[str, Any]) -> str:
    """`Kind/namespace/name`, as error lines name an object."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else None)
    parts = [str(obj.get("kind") or "object"), meta.get("namespace"), name or "<unnamed>"]
    return "/".join(str(p) for p in parts if p)


def namespace_of(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    return namespace if isinstance(namespace, str) and namespace else None


def _dotted(path: tuple[str | int, ...]) -> str:
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text


def _template_at(obj: Mapping[str, Any], path: tuple[str | int, ...]) -> PodTemplate | None:
    node: Any = obj
    for key in path:
        if isinstance(key, int):
            node = node[key] if isinstance(node, list) and key < len(node) else None
        else:
            node = node.get(key) if isinstance(node, Mapping) else None
    if not isinstance(node, Mapping) or not isinstance(node.get("spec"), Mapping):
        return None
    metadata = node.get("metadata")
    pointer, dotted = "/" + "/".join(str(k) for k in path), _dotted(path)
    return PodTemplate(
        spec=node["spec"],
        metadata=metadata if isinstance(metadata, Mapping) else None,
        spec_pointer=f"{pointer}/spec",
        metadata_pointer=f"{pointer}/metadata",
        spec_path=f"{dotted}.spec",
        metadata_path=f"{dotted}.metadata",
    )


def template_path(obj: Mapping[str, Any]) -> tuple[str | int, ...] | None:
    """The path to the pod template of a workload, () for a Pod (its own template), None for
    objects with no template or several (Volcano Jobs: one per task)."""
    kind = _BY_GROUP_KIND.get((api_group(obj), str(obj.get("kind"))))
    return kind.template_path if kind else None


def container_count(spec: Mapping[str, Any]) -> int:
    """How many containers and init containers a pod spec lists (items of any type)."""
    return sum(len(items) for name in CONTAINER_LISTS if isinstance(items := spec.get(name), list))


def pod_templates(obj: Mapping[str, Any]) -> list[PodTemplate]:
    """Every pod template of `obj`; [] for objects that carry none (Services, PVCs, …)."""
    group, kind = api_group(obj), obj.get("kind")
    if group == "" and kind == "Pod":
        spec, metadata = obj.get("spec"), obj.get("metadata")
        if not isinstance(spec, Mapping):
            return []
        return [
            PodTemplate(
                spec=spec,
                metadata=metadata if isinstance(metadata, Mapping) else None,
                spec_pointer="/spec",
                metadata_pointer="/metadata",
                spec_path="spec",
                metadata_path="metadata",
            )
        ]
    if group == VOLCANO_GROUP and kind == "Job":
        spec = obj.get("spec")
        tasks = spec.get("tasks") if isinstance(spec, Mapping) else None
        if not isinstance(tasks, list):
            return []
        found = [_template_at(obj, ("spec", "tasks", i, "template")) for i in range(len(tasks))]
        return [t for t in found if t is not None]
    path = template_path(obj)
    template = _template_at(obj, path) if path else None
    return [template] if template else []
