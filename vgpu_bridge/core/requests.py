"""Which containers of a pod template ask for a GPU share, read through the request dialects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_bridge.core.claim_groups import ContainerKind
from vgpu_bridge.core.dialects import DIALECTS, Dialect, PodRequest
from vgpu_bridge.core.dialects.resources import resources_of
from vgpu_bridge.core.errors import shown
from vgpu_bridge.core.models import Problems, RawRequest
from vgpu_bridge.core.workloads import CONTAINER_LISTS, PodTemplate


@dataclass(frozen=True, slots=True)
class Container:
    """One container of a pod template, with its JSON pointer, its dotted path, and whether it
    runs alone before the apps (`init`), beside them (`sidecar`: an init container with
    `restartPolicy: Always`) or is one of them (`app`)."""

    body: Mapping[str, Any]
    pointer: str
    path: str
    kind: ContainerKind = "app"


@dataclass(frozen=True, slots=True)
class Share:
    """One container that asks for a GPU share, and what it literally asked for."""

    container: Container
    raw: RawRequest


def containers(template: PodTemplate) -> list[Container]:
    """The template's containers, init containers first."""
    found = []
    for list_name in CONTAINER_LISTS:
        for index, body in enumerate(template.spec.get(list_name) or ()):
            if isinstance(body, Mapping):
                pointer = f"{template.spec_pointer}/{list_name}/{index}"
                path = f"{template.spec_path}.{list_name}[{index}]"
                found.append(Container(body, pointer, path, _kind(list_name, body)))
    return found


def _kind(list_name: str, body: Mapping[str, Any]) -> ContainerKind:
    if list_name == "containers":
        return "app"
    return "sidecar" if body.get("restartPolicy") == "Always" else "init"


def shares(
    template: PodTemplate, problems: Problems, dialects: tuple[Dialect, ...] = DIALECTS
) -> list[Share]:
    """Containers asking for a GPU (init first), then those the pod's annotations ask for; each
    dialect then checks the pod as a whole."""
    listed = containers(template)
    found = []
    for container in listed:
        raw = _container_request(container, dialects, problems)
        if raw is not None and raw.asks_for_gpu():
            found.append(Share(container, raw))
    by_name = {str(c.body.get("name")): c for c in listed}
    own = {}
    for dialect in dialects:
        own[dialect.family] = request = dialect.read_pod(template, problems=problems)
        if request is not None:
            _attach(request, dialect, by_name, found, problems)
    for dialect in dialects:
        dialect.check_pod(template, own=own[dialect.family], asks=bool(found), problems=problems)
    return found


def _container_request(
    container: Container, dialects: tuple[Dialect, ...], problems: Problems
) -> RawRequest | None:
    """The container's request in the one dialect its resources use; None when they use none."""
    resources = resources_of(container.body, path=container.path, problems=problems)
    used = [d for d in dialects if resources.names_any(d.resources)]
    if len(used) > 1:
        mixed = " and ".join(f"{d.family} ({d.resources[0]}, …)" for d in used)
        problems.add(f"{container.path}.resources", f"mixes {mixed}; state a share one way")
        return None
    if not used:
        return None
    path = f"{container.path}.resources"
    return used[0].read_resources(resources, path=path, problems=problems)


def _attach(
    request: PodRequest,
    dialect: Dialect,
    by_name: Mapping[str, Container],
    found: list[Share],
    problems: Problems,
) -> None:
    """A pod-level request joins its container, unless that one asks through resources too."""
    container = by_name.get(str(request.container))
    if container is None:
        problems.add(
            request.container_path, f"names no container of this pod: {shown(request.container)}"
        )
        return
    if any(s.container.body is container.body for s in found):
        problems.add(
            f"{container.path}.resources",
            f"asks for GPUs through resources and through {dialect.family}'s annotations; "
            "state a share one way",
        )
        return
    found.append(Share(container, request.raw))
