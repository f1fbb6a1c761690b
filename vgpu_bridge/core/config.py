"""Translator settings, meant as legacy HAMi means them (its device ConfigMap's `nvidia:`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TranslatorConfig(BaseModel):
    """How a partial request is completed.

    - `default_memory`: MiB per GPU when neither gpumem nor a percentage is given; 0 = whole card.
    - `default_cores`: SM percent for a shared (non-exclusive) GPU without gpucores; 0 = no limit.
    - `default_gpu_num`: GPUs per container when gpumem/gpucores/percentage come without a count.
    - `memory_factor`: gpumem is written in units of this many MiB.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    default_memory: int = Field(default=0, ge=0, alias="defaultMemory")
    default_cores: int = Field(default=0, ge=0, le=100, alias="defaultCores")
    default_gpu_num: int = Field(default=1, ge=1, alias="defaultGPUNum")
    memory_factor: int = Field(default=1, ge=1, alias="memoryFactor")
