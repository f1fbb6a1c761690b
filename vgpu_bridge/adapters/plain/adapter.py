"""The core translation as it is: nothing scheduler-specific to add."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_bridge.core import Plan, TranslationContext, translate


class PlainAdapter:
    """For kube-scheduler and any DRA-aware scheduler without quirks; also the fallback."""

    name = "default"

    def recognises(self, obj: Mapping[str, Any]) -> bool:
        return True

    def translate(self, obj: Mapping[str, Any], *, context: TranslationContext) -> Plan:
        return translate(obj, context=context, adapter=self.name)
