"""The resource and annotation names users write today (HAMi, Volcano, KAI) and the names we add."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """One family of extended-resource names that describe a GPU share."""

    family: str
    count: str
    memory: str
    memory_percentage: str
    cores: str
    priority: str | None

    def all(self) -> tuple[str, ...]:
        names = (self.count, self.memory, self.memory_percentage, self.cores, self.priority)
        return tuple(n for n in names if n is not None)


HAMI = ResourceNames(
    family="HAMi",
    count="nvidia.com/gpu",
    memory="nvidia.com/gpumem",
    memory_percentage="nvidia.com/gpumem-percentage",
    cores="nvidia.com/gpucores",
    priority="nvidia.com/priority",
)
VOLCANO = ResourceNames(
    family="Volcano",
    count="volcano.sh/vgpu-number",
    memory="volcano.sh/vgpu-memory",
    memory_percentage="volcano.sh/vgpu-memory-percentage",
    cores="volcano.sh/vgpu-cores",
    priority=None,
)
RESOURCE_FAMILIES = (HAMI, VOLCANO)
TRANSLATED_RESOURCES = frozenset(name for f in RESOURCE_FAMILIES for name in f.all())

# Device choice (pod annotations). Volcano's uuid keys mean the same as HAMi's.
USE_GPUTYPE = ("nvidia.com/use-gputype",)
NOUSE_GPUTYPE = ("nvidia.com/nouse-gputype",)
USE_GPUUUID = ("nvidia.com/use-gpuuuid", "volcano.sh/vgpu-use-gpuuuid")
NOUSE_GPUUUID = ("nvidia.com/nouse-gpuuuid", "volcano.sh/vgpu-nouse-gpuuuid")
DEVICE_CHOICE_ANNOTATIONS = USE_GPUTYPE + NOUSE_GPUTYPE + USE_GPUUUID + NOUSE_GPUUUID

# Sharing mode: "mig" asks for hardware isolation that a software share cannot give.
VGPU_MODE = ("nvidia.com/vgpu-mode", "volcano.sh/vgpu-mode")

# Placement hints that DRA leaves to the scheduler: kept on the pod, answered with a warning.
PLACEMENT_ANNOTATIONS = (
    "hami.io/gpu-scheduler-policy",
    "hami.io/node-scheduler-policy",
    "nvidia.com/numa-bind",
)

# KAI's sharing annotations (no prefix), which KAI refuses on DRA nodes: translated, then removed.
KAI_FRACTION = "gpu-fraction"
KAI_MEMORY = "gpu-memory"
KAI_NUM_DEVICES = "gpu-fraction-num-devices"
KAI_CONTAINER_NAME = "gpu-fraction-container-name"
KAI_MPS = "mps"  # KAI accepts it only beside a fraction, which translation removes
KAI_ANNOTATIONS = (KAI_FRACTION, KAI_MEMORY, KAI_NUM_DEVICES, KAI_CONTAINER_NAME, KAI_MPS)

TRANSLATED_ANNOTATIONS = frozenset(DEVICE_CHOICE_ANNOTATIONS + KAI_ANNOTATIONS)

# What we add.
TRANSLATED_LABEL = "vgpu-bridge.io/translated"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "vgpu-bridge"
