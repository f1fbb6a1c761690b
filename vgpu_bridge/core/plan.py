"""The result of translating one object: what to create, how to change it, what to tell the user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vgpu_bridge.core.jsonpatch import PatchOp, apply_patch


@dataclass(frozen=True, slots=True)
class Plan:
    """Pure data; the webhook executes it, the CLI prints it.

    `templates` must exist before the patched object is admitted; `patch` is RFC 6902 against the
    object as given; an empty patch means the object is not ours to change.
    """

    object_ref: str
    adapter: str
    patch: tuple[PatchOp, ...] = ()
    templates: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def changes_object(self) -> bool:
        return bool(self.patch)

    def apply_to(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as it will look after admission."""
        return apply_patch(obj, self.patch) if self.patch else obj
