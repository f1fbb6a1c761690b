"""Pods HAMi refuses at admission even when their request reads well (hami.md §2.1,
HAMi `pkg/scheduler/webhook.go`): checked for pod templates that ask for a GPU, and by the
webhook for any pod that names a claim of our DeviceClass (guardrails follow the claim). And one
of ours: a container naming two claims of our class (their limits cannot both reach it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_bridge.core.config import TranslatorConfig
from vgpu_bridge.core.models import Problems
from vgpu_bridge.core.requests import containers
from vgpu_bridge.core.workloads import PodTemplate


def check_pod(template: PodTemplate, *, config: TranslatorConfig, problems: Problems) -> None:
    """A pod bound to a node by hand, or one with a privileged container, is refused."""
    node_name = template.spec.get("nodeName")
    if node_name:
        problems.add(
            f"{template.spec_path}.nodeName",
            "is set, so no scheduler places this pod and no one allocates its GPU claims (it would "
            "never start); leave nodeName out and choose the node with a nodeSelector or affinity",
        )
    if config.allow_privileged:
        return
    for container in containers(template):
        context = container.body.get("securityContext")
        if isinstance(context, Mapping) and context.get("privileged") is True:
            problems.add(
                f"{container.path}.securityContext.privileged",
                "is true in a pod that asks for a GPU share: a privileged container sees every "
                "GPU and escapes its share (HAMi refuses it too); an administrator may allow it "
                "with the allow-privileged setting (webhook: VGPU_BRIDGE_ALLOW_PRIVILEGED=true, "
                "translate: --allow-privileged)",
            )


def several_claims(template: PodTemplate) -> set[str]:
    """The pod-claim names (`spec.resourceClaims[].name`) of containers that name two or more
    claims: the only ones whose class `check_claims_per_container` needs to know."""
    found: set[str] = set()
    for container in containers(template):
        named = _claims_of(container.body)
        if len(named) > 1:
            found.update(named)
    return found


def check_claims_per_container(
    template: PodTemplate, *, ours: Mapping[str, str], device_class: str, problems: Problems
) -> None:
    """A container that names two claims of our class is refused (issue #25 item 3): each claim's
    CDI spec mounts its limits file at the same path in the container, so only one claim's limits
    would reach it and the other claim's GPU would run without them (libvgpu refuses that GPU).
    `ours` maps the pod-claim names known to be of our class (or unreadable) to what they claim
    (e.g. "ResourceClaim a"): two names for one ResourceClaim are one claim."""
    for container in containers(template):
        claimed = dict.fromkeys(ours[name] for name in _claims_of(container.body) if name in ours)
        if len(claimed) < 2:
            continue
        problems.add(
            f"{container.path}.resources.claims",
            f"container {container.body.get('name')!r} names {len(claimed)} claims of class "
            f"{device_class} ({', '.join(claimed)}): only one claim's limits can reach a "
            "container, so the others' GPUs would run unlimited; ask for all of its GPUs in one "
            "claim (one request with a count, or several requests), or give each claim its own "
            "container",
        )


def _claims_of(container: Mapping[str, Any]) -> list[str]:
    """The distinct pod-claim names in a container's `resources.claims`, in order."""
    resources = container.get("resources")
    entries = resources.get("claims") if isinstance(resources, Mapping) else None
    names = [e.get("name") for e in entries or () if isinstance(e, Mapping)]
    return list(dict.fromkeys(n for n in names if isinstance(n, str)))
