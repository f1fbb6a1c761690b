"""Complete a raw request the way legacy HAMi does (hami.md §1.2)."""

from __future__ import annotations

from decimal import Decimal

from vgpu_bridge.core.config import TranslatorConfig
from vgpu_bridge.core.models import GpuRequest, Problems, RawRequest

WHOLE = Decimal(100)


def normalise(
    raw: RawRequest, *, config: TranslatorConfig, problems: Problems, warnings: list[str]
) -> GpuRequest | None:
    """Defaults, in HAMi's order: count, then memory (gpumem wins), then cores.

    - no count but a share → `default_gpu_num` cards;
    - gpumem (times memory_factor) wins over a percentage; neither → `default_memory`, and when that
      is 0 the whole card's memory;
    - no gpucores → 100 when the memory is exclusive, else `default_cores`.
    """
    count = config.default_gpu_num if raw.count is None else raw.count
    if count == 0:
        problems.add(raw.sources["count"], "must be at least 1 when a GPU share is asked for")
        return None
    memory_mib, percent = raw.memory_mib, raw.memory_percent
    if memory_mib is not None:
        memory_mib *= config.memory_factor
        if percent is not None:
            warnings.append(
                f"{raw.sources['memory_percent']} is ignored: "
                f"{raw.sources['memory_mib']} is set and wins, as in HAMi"
            )
            percent = None
    elif percent is None:
        memory_mib = config.default_memory or None
        percent = None if memory_mib else WHOLE
    exclusive = memory_mib is None and percent == WHOLE
    cores = raw.cores if raw.cores is not None else (100 if exclusive else config.default_cores)
    return GpuRequest(
        count=count,
        memory_mib=memory_mib,
        memory_percent=percent,
        cores=cores,
        priority=raw.priority,
    )
