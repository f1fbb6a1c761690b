"""Volcano's request dialect: the names of Volcano's vGPU device plugin (volcano.md §1).

- Extended resources per container, read like HAMi's: `volcano.sh/vgpu-number` (cards),
  `vgpu-memory` (MiB), `vgpu-memory-percentage`, `vgpu-cores`; no priority.
- Its uuid annotations mean the same as HAMi's; it has no product-name choice.
- `volcano.sh/vgpu-mode: mig` is refused, as HAMi's.
"""

from __future__ import annotations

from dataclasses import replace

from vgpu_bridge.core.config import TranslatorConfig
from vgpu_bridge.core.dialects.dialect import AnnotationNames, ResourceDialect
from vgpu_bridge.core.dialects.resources import ResourceNames

RESOURCES = ResourceNames(
    family="Volcano",
    count="volcano.sh/vgpu-number",
    memory="volcano.sh/vgpu-memory",
    memory_percentage="volcano.sh/vgpu-memory-percentage",
    cores="volcano.sh/vgpu-cores",
    priority=None,
)
ANNOTATIONS = AnnotationNames(
    use_uuids=("volcano.sh/vgpu-use-gpuuuid",),
    avoid_uuids=("volcano.sh/vgpu-nouse-gpuuuid",),
    mode=("volcano.sh/vgpu-mode",),
)
DIALECT = ResourceDialect(RESOURCES, ANNOTATIONS)


def for_config(config: TranslatorConfig) -> ResourceDialect:
    """Volcano's dialect; the memory factor applies to its memory as to HAMi's."""
    return replace(DIALECT, memory_factor=config.memory_factor)
