"""Which adapter handles an object: the first specific one that recognises it, else the fallback."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vgpu_bridge.adapters.base import SchedulerAdapter
from vgpu_bridge.adapters.kai import KaiAdapter
from vgpu_bridge.adapters.plain import PlainAdapter
from vgpu_bridge.adapters.volcano import VolcanoAdapter
from vgpu_bridge.core.shapes import check_shape

AUTO = "auto"


class AdapterRegistry:
    def __init__(self, specific: Sequence[SchedulerAdapter], fallback: SchedulerAdapter) -> None:
        self._specific = tuple(specific)
        self._fallback = fallback
        self._by_name = {a.name: a for a in (*self._specific, fallback)}

    def names(self) -> list[str]:
        """Every adapter name, the fallback first."""
        return [self._fallback.name, *(a.name for a in self._specific)]

    def get(self, name: str) -> SchedulerAdapter:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join([AUTO, *self.names()])
            raise KeyError(f"unknown scheduler adapter {name!r} (known: {known})") from None

    def pick(self, obj: Mapping[str, Any], scheduler: str = AUTO) -> SchedulerAdapter:
        """The named adapter, or with `auto` the first that recognises `obj`; `InvalidRequest`
        names the fields of a wrong type, which no adapter could read."""
        check_shape(obj)
        if scheduler != AUTO:
            return self.get(scheduler)
        return next((a for a in self._specific if a.recognises(obj)), self._fallback)


def default_registry(
    *,
    volcano_scheduler_names: Sequence[str] = ("volcano",),
    volcano_version: str | None = None,
    kai_scheduler_names: Sequence[str] = ("kai-scheduler",),
    kai_version: str | None = None,
    kai_refuse_without_capacity: bool = False,
) -> AdapterRegistry:
    """Every adapter we ship, the plain one as the fallback."""
    volcano = VolcanoAdapter(
        scheduler_names=tuple(volcano_scheduler_names), version=volcano_version
    )
    kai = KaiAdapter(
        scheduler_names=tuple(kai_scheduler_names),
        version=kai_version,
        refuse_without_capacity=kai_refuse_without_capacity,
    )
    return AdapterRegistry(specific=[volcano, kai], fallback=PlainAdapter())
