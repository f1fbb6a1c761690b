"""Custom workload kinds (JobSet, LeaderWorkerSet, Kubeflow jobs, Ray, Argo...) whose objects may
name our templates: the sweeper lists them too, so that a template only such an object names is
kept. Their pod templates sit where each project puts them, so the names are found by a bounded
walk over the whole object (which a user wrote) rather than by known paths."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vgpu_bridge.flag_settings import comma_list
from vgpu_bridge.kube import api_path

# The common ones; `--extra-workload-resources` replaces the list (empty: none).
DEFAULT_EXTRA_WORKLOAD_RESOURCES = ",".join(
    (
        "jobsets.jobset.x-k8s.io/v1alpha2",
        "leaderworkersets.leaderworkerset.x-k8s.io/v1",
        "pytorchjobs.kubeflow.org/v1",
        "tfjobs.kubeflow.org/v1",
        "mpijobs.kubeflow.org/v1",
        "rayclusters.ray.io/v1",
        "rayjobs.ray.io/v1",
        "rayservices.ray.io/v1",
        "workflows.argoproj.io/v1alpha1",
        "cronworkflows.argoproj.io/v1alpha1",
    )
)
TEMPLATE_KEY = "resourceClaimTemplateName"
# Bounds of the walk: an object deeper or larger than this is not read, and its namespace's
# templates are all kept (a user may make an object of any shape; a sweep must stay cheap).
MAX_DEPTH = 64
MAX_NODES = 100_000

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_RESOURCE = re.compile(
    rf"^(?P<resource>{_LABEL})\.(?P<group>{_LABEL}(\.{_LABEL})+)/(?P<version>{_LABEL})$"
)


@dataclass(frozen=True, slots=True)
class ExtraResource:
    """One custom resource to list: `<resource>.<group>/<version>`."""

    resource: str
    group: str
    version: str

    def list_path(self, namespace: str) -> str:
        return api_path(
            f"/apis/{self.group}/{self.version}", "namespaces", namespace, self.resource
        )

    def __str__(self) -> str:
        return f"{self.resource}.{self.group}/{self.version}"


def _parse_one(text: str) -> ExtraResource:
    match = _RESOURCE.match(text)
    if match is None or len(match["group"]) > 253:
        raise ValueError(
            f"{text!r} is not <resource>.<group>/<version> (lower case, e.g. "
            "jobsets.jobset.x-k8s.io/v1alpha2; the group has a dot, core kinds are built in)"
        )
    return ExtraResource(match["resource"], match["group"], match["version"])


def parse_extra_resources(text: str) -> tuple[ExtraResource, ...]:
    """The comma list of `--extra-workload-resources`, in order, without repeats."""
    return tuple(dict.fromkeys(_parse_one(item) for item in comma_list(text)))


def extra_resources_problem(text: str) -> str | None:
    """The settings check: why `text` is no list of resources, or None."""
    try:
        parse_extra_resources(text)
    except ValueError as error:
        return str(error)
    return None


class TooLarge(Exception):
    """An object past the walk's bounds."""


def template_names_anywhere(
    objects: Iterable[Any], *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES
) -> set[str]:
    """Every string value of a `resourceClaimTemplateName` key at any depth of `objects`.
    Iterative, and bounded per object: raises `TooLarge` past `max_depth` nesting or
    `max_nodes` dicts and lists."""
    names: set[str] = set()
    for obj in objects:
        stack: list[tuple[Any, int]] = [(obj, 0)]
        nodes = 0
        while stack:
            node, depth = stack.pop()
            nodes += 1
            if nodes > max_nodes:
                raise TooLarge(f"more than {max_nodes} nodes")
            if depth > max_depth:
                raise TooLarge(f"deeper than {max_depth}")
            if isinstance(node, dict):
                for key, value in node.items():
                    if key == TEMPLATE_KEY and isinstance(value, str) and value:
                        names.add(value)
                    elif isinstance(value, dict | list):
                        stack.append((value, depth + 1))
            elif isinstance(node, list):
                stack.extend((value, depth + 1) for value in node if isinstance(value, dict | list))
    return names
