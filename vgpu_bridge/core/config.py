"""Translator settings, meant as legacy HAMi means them (its device ConfigMap's `nvidia:`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: an extended resource name: a DNS domain, a slash, a name
RESOURCE_NAME_PATTERN = (
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
ResourceName = Annotated[str, Field(pattern=RESOURCE_NAME_PATTERN)]


class TranslatorConfig(BaseModel):
    """How a partial request is completed.

    - `default_memory`: MiB per GPU when neither gpumem nor a percentage is given; 0 = whole card.
    - `default_cores`: SM percent for a shared (non-exclusive) GPU without gpucores; 0 = no limit.
    - `default_gpu_num`: GPUs per container when gpumem/gpucores/percentage come without a count.
    - `memory_factor`: gpumem is written in units of this many MiB.
    - `resource_*_name`: HAMi's extended-resource names, renamed as a HAMi cluster may have them
      (its `resourceCountName`, `resourceMemoryName`, …).
    - `allow_privileged`: admit GPU pods with a privileged container (HAMi >= 2.10 refuses them:
      a privileged container sees every GPU and escapes its share).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    default_memory: int = Field(default=0, ge=0, alias="defaultMemory")
    default_cores: int = Field(default=0, ge=0, le=100, alias="defaultCores")
    default_gpu_num: int = Field(default=1, ge=1, alias="defaultGPUNum")
    memory_factor: int = Field(default=1, ge=1, alias="memoryFactor")
    resource_count_name: ResourceName = Field("nvidia.com/gpu", alias="resourceCountName")
    resource_memory_name: ResourceName = Field("nvidia.com/gpumem", alias="resourceMemoryName")
    resource_memory_percentage_name: ResourceName = Field(
        "nvidia.com/gpumem-percentage", alias="resourceMemoryPercentageName"
    )
    resource_core_name: ResourceName = Field("nvidia.com/gpucores", alias="resourceCoreName")
    resource_priority_name: ResourceName = Field(
        "nvidia.com/priority", alias="resourcePriorityName"
    )
    allow_privileged: bool = Field(default=False, alias="allowPrivileged")

    def resource_names(self) -> tuple[str, str, str, str, str]:
        """HAMi's names: count, memory, memory percentage, cores, priority."""
        return (
            self.resource_count_name,
            self.resource_memory_name,
            self.resource_memory_percentage_name,
            self.resource_core_name,
            self.resource_priority_name,
        )

    @model_validator(mode="after")
    def _names_differ(self) -> TranslatorConfig:
        if len(set(self.resource_names())) < len(self.resource_names()):
            raise ValueError(f"HAMi's resource names must differ, got {self.resource_names()}")
        return self
