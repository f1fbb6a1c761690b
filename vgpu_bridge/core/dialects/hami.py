"""HAMi's request dialect: the names users write for HAMi today (hami.md §1).

- Extended resources per container, limits read first, then requests: `nvidia.com/gpu` (cards,
  on distinct cards), `gpumem` (MiB), `gpumem-percentage` (used only when gpumem is absent),
  `gpucores` (percent of SMs), `priority` (0 high, 1 low; only HAMi has it).
- Device choice in pod annotations: `use-gputype` / `nouse-gputype` (product-name substrings),
  `use-gpuuuid` / `nouse-gpuuuid` (exact uuids); translated, then removed.
- `vgpu-mode: mig` is refused; the scheduler-policy and NUMA hints are kept and warned about.
- The resource names are configurable, as HAMi's (`resourceCountName`, …): `for_config`.
"""

from __future__ import annotations

from dataclasses import replace

from vgpu_bridge.core.config import TranslatorConfig
from vgpu_bridge.core.dialects.dialect import AnnotationNames, ResourceDialect
from vgpu_bridge.core.dialects.resources import ResourceNames

RESOURCES = ResourceNames(
    family="HAMi",
    count="nvidia.com/gpu",
    memory="nvidia.com/gpumem",
    memory_percentage="nvidia.com/gpumem-percentage",
    cores="nvidia.com/gpucores",
    priority="nvidia.com/priority",
)
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"  # `mutex`: only cards no one uses
ANNOTATIONS = AnnotationNames(
    use_types=("nvidia.com/use-gputype",),
    avoid_types=("nvidia.com/nouse-gputype",),
    use_uuids=("nvidia.com/use-gpuuuid",),
    avoid_uuids=("nvidia.com/nouse-gpuuuid",),
    mode=("nvidia.com/vgpu-mode",),
    placement=(
        GPU_SCHEDULER_POLICY,
        "hami.io/node-scheduler-policy",
        "nvidia.com/numa-bind",
    ),
)
DIALECT = ResourceDialect(RESOURCES, ANNOTATIONS)


def for_config(config: TranslatorConfig) -> ResourceDialect:
    """HAMi's dialect under the cluster's resource names and memory factor."""
    count, memory, percentage, cores, priority = config.resource_names()
    names = ResourceNames("HAMi", count, memory, percentage, cores, priority)
    return replace(DIALECT, names=names, memory_factor=config.memory_factor)
