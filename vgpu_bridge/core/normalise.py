"""Complete a raw request the way legacy HAMi does (hami.md §1.2)."""

from __future__ import annotations

from decimal import Decimal

from vgpu_bridge.core.config import TranslatorConfig
from vgpu_bridge.core.dialects.resources import MAX_GPUMEM_MIB
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
    memory = _memory(raw, config=config, problems=problems, warnings=warnings)
    if memory is None:
        return None
    memory_mib, percent = memory
    exclusive = memory_mib is None and percent == WHOLE
    cores = raw.cores if raw.cores is not None else (100 if exclusive else config.default_cores)
    return GpuRequest(
        count=count,
        memory_mib=memory_mib,
        memory_percent=percent,
        cores=cores,
        priority=raw.priority,
    )


def _memory(
    raw: RawRequest, *, config: TranslatorConfig, problems: Problems, warnings: list[str]
) -> tuple[int | None, Decimal | None] | None:
    """(MiB, percent) of each card, HAMi's way; None after recording why the MiB are too many."""
    memory_mib, percent = raw.memory_mib, raw.memory_percent
    if memory_mib is None:
        if percent is not None:
            return None, percent
        memory_mib = config.default_memory or None
        return memory_mib, None if memory_mib else WHOLE
    memory_mib *= config.memory_factor
    if memory_mib > MAX_GPUMEM_MIB:
        problems.add(
            raw.sources["memory_mib"],
            f"times the memory factor {config.memory_factor} is {memory_mib} MiB, more than "
            f"HAMi takes (at most {MAX_GPUMEM_MIB} MiB, an int32)",
        )
        return None
    if percent is not None:
        warnings.append(
            f"{raw.sources['memory_percent']} is ignored: "
            f"{raw.sources['memory_mib']} is set and wins, as in HAMi"
        )
    return memory_mib, None
