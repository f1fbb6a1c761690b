"""Pods HAMi refuses at admission even when their request reads well (hami.md §2.1,
HAMi `pkg/scheduler/webhook.go`): checked for pod templates that ask for a GPU, and by the
webhook for any pod that names a claim of our DeviceClass (guardrails follow the claim)."""

from __future__ import annotations

from collections.abc import Mapping

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
