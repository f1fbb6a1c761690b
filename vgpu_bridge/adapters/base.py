"""The protocol every scheduler adapter implements."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from vgpu_bridge.core import Plan, TranslationContext


class SchedulerAdapter(Protocol):
    """Recognises the objects of one scheduler and translates them, quirks included."""

    @property
    def name(self) -> str:
        """What `--scheduler` calls it, e.g. `default`, `volcano`, `kai`."""
        ...

    def recognises(self, obj: Mapping[str, Any]) -> bool:
        """True when `obj` is scheduled by this adapter's scheduler."""
        ...

    def translate(self, obj: Mapping[str, Any], *, context: TranslationContext) -> Plan:
        """The plan for `obj`; raises `core.InvalidRequest` for a request to refuse."""
        ...
