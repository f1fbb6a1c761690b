"""Where the pod templates sit in each kind of workload we translate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# (API group, kind) → the path from the object to its pod template.
_TEMPLATE_PATHS: dict[tuple[str, str], tuple[str | int, ...]] = {
    ("apps", "Deployment"): ("spec", "template"),
    ("apps", "StatefulSet"): ("spec", "template"),
    ("apps", "DaemonSet"): ("spec", "template"),
    ("apps", "ReplicaSet"): ("spec", "template"),
    ("", "ReplicationController"): ("spec", "template"),
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
}
VOLCANO_GROUP = "batch.volcano.sh"


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
    group, kind = api_group(obj), obj.get("kind")
    if group == "" and kind == "Pod":
        return ()
    return _TEMPLATE_PATHS.get((group, str(kind)))


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
    path = _TEMPLATE_PATHS.get((group, str(kind)))
    template = _template_at(obj, path) if path else None
    return [template] if template else []
