"""Translator settings, meant as legacy HAMi means them (its device ConfigMap's `nvidia:`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

#: an extended resource name: a DNS domain, a slash, a name
RESOURCE_NAME_PATTERN = (
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_RESOURCE_NAME = re.compile(RESOURCE_NAME_PATTERN)


def resource_name_problem(value: object) -> str | None:
    """Why `value` is no extended resource name, or None when it is one."""
    if isinstance(value, str) and _RESOURCE_NAME.fullmatch(value):
        return None
    return f"must match the pattern {RESOURCE_NAME_PATTERN} (domain/name), got {value!r:.80}"


def _hami(name: str) -> dict[str, str]:
    """A field's metadata: what HAMi's device ConfigMap calls it."""
    return {"hami": name}


@dataclass(frozen=True, slots=True, kw_only=True)
class TranslatorConfig:
    """How a partial request is completed.

    - `default_memory`: MiB per GPU when neither gpumem nor a percentage is given; 0 = whole card.
    - `default_cores`: SM percent for a shared (non-exclusive) GPU without gpucores; 0 = no limit.
    - `default_gpu_num`: GPUs per container when gpumem/gpucores/percentage come without a count.
    - `memory_factor`: gpumem is written in units of this many MiB.
    - `resource_*_name`: HAMi's extended-resource names, renamed as a HAMi cluster may have them
      (its `resourceCountName`, `resourceMemoryName`, …).
    - `allow_privileged`: admit GPU pods with a privileged container (HAMi >= 2.10 refuses them:
      a privileged container sees every GPU and escapes its share).

    A value out of range is a ValueError naming every bad field.
    """

    default_memory: int = field(default=0, metadata=_hami("defaultMemory"))
    default_cores: int = field(default=0, metadata=_hami("defaultCores"))
    default_gpu_num: int = field(default=1, metadata=_hami("defaultGPUNum"))
    memory_factor: int = field(default=1, metadata=_hami("memoryFactor"))
    resource_count_name: str = field(default="nvidia.com/gpu", metadata=_hami("resourceCountName"))
    resource_memory_name: str = field(
        default="nvidia.com/gpumem", metadata=_hami("resourceMemoryName")
    )
    resource_memory_percentage_name: str = field(
        default="nvidia.com/gpumem-percentage", metadata=_hami("resourceMemoryPercentageName")
    )
    resource_core_name: str = field(
        default="nvidia.com/gpucores", metadata=_hami("resourceCoreName")
    )
    resource_priority_name: str = field(
        default="nvidia.com/priority", metadata=_hami("resourcePriorityName")
    )
    allow_privileged: bool = field(default=False, metadata=_hami("allowPrivileged"))

    def __post_init__(self) -> None:
        problems = [f"{name}: {reason}" for name, reason in self._problems()]
        if problems:
            raise ValueError("; ".join(problems))

    def _problems(self) -> list[tuple[str, str]]:
        ranges = {"default_memory": (0, None), "default_cores": (0, 100),
                  "default_gpu_num": (1, None), "memory_factor": (1, None)}  # fmt: skip
        problems = []
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            if type(value) is not int or value < low or (high is not None and value > high):
                bounds = f"{low}..{high}" if high is not None else f"at least {low}"
                problems.append((name, f"must be an integer {bounds}, got {value!r:.80}"))
        for name, value in zip(RESOURCE_NAME_FIELDS, self.resource_names(), strict=True):
            if (reason := resource_name_problem(value)) is not None:
                problems.append((name, reason))
        if type(self.allow_privileged) is not bool:
            problems.append(
                ("allow_privileged", f"must be a boolean, got {self.allow_privileged!r:.80}")
            )
        if not problems and len(set(self.resource_names())) < len(self.resource_names()):
            problems.append(
                (
                    "resource names",
                    f"HAMi's resource names must differ, got {self.resource_names()}",
                )
            )
        return problems

    def resource_names(self) -> tuple[str, str, str, str, str]:
        """HAMi's names: count, memory, memory percentage, cores, priority."""
        return (
            self.resource_count_name,
            self.resource_memory_name,
            self.resource_memory_percentage_name,
            self.resource_core_name,
            self.resource_priority_name,
        )


#: the fields that hold HAMi's resource names, in `resource_names()` order
RESOURCE_NAME_FIELDS = (
    "resource_count_name",
    "resource_memory_name",
    "resource_memory_percentage_name",
    "resource_core_name",
    "resource_priority_name",
)


def hami_setting(name: str) -> tuple[str, object]:
    """What HAMi's device ConfigMap calls the TranslatorConfig field `name`, and its default."""
    (found,) = (f for f in fields(TranslatorConfig) if f.name == name)
    return found.metadata["hami"], found.default
