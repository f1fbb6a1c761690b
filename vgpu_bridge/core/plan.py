"""The result of translating one object: what to create, how to change it, what to tell the user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vgpu_bridge.core.jsonpatch import PatchOp, apply_patch
from vgpu_bridge.core.workloads import PodTemplate


@dataclass(frozen=True, slots=True)
class TranslatedContainer:
    """A container whose GPU request became a claim."""

    path: str  # e.g. `spec.template.spec.containers[0]`
    claim: str  # the claim's name in the pod, listed in the container's `resources.claims`
    template_name: str  # the ResourceClaimTemplate the claim is made from


@dataclass(frozen=True, slots=True)
class TranslatedPod:
    """A pod template the plan changes: as it was given, and its containers that got claims."""

    template: PodTemplate
    containers: tuple[TranslatedContainer, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """Pure data; the webhook executes it, the CLI prints it.

    `templates` must exist before the patched object is admitted; `patch` is RFC 6902 against the
    object as given; an empty patch means the object is not ours to change. `translated` says
    which pod templates the patch gives claims, so no caller has to walk or patch the object to
    find out.
    """

    object_ref: str
    adapter: str
    patch: tuple[PatchOp, ...] = ()
    templates: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    translated: tuple[TranslatedPod, ...] = ()

    @property
    def changes_object(self) -> bool:
        return bool(self.patch)

    def apply_to(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as it will look after admission."""
        return apply_patch(obj, self.patch) if self.patch else obj
