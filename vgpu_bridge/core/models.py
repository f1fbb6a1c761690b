"""The request model every input format (HAMi, Volcano, KAI) is read into."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from vgpu_bridge.core.errors import FieldError


class GpuRequest(BaseModel):
    """One container's GPU share after normalisation: `count` cards, each with this share."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(ge=1)
    memory_mib: int | None = Field(default=None, ge=1)
    memory_percent: Decimal | None = Field(default=None, gt=0, le=100)
    cores: int = Field(ge=0, le=100)
    priority: int | None = Field(default=None, ge=0, le=1)

    @property
    def whole_card_memory(self) -> bool:
        """True when the memory of each card is the container's alone."""
        return self.memory_mib is None and self.memory_percent == 100


class DeviceFilter(BaseModel):
    """Pod-level device choice: product-name substrings and exact uuids to use or avoid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    use_types: tuple[str, ...] = ()
    avoid_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    avoid_uuids: tuple[str, ...] = ()


@dataclass(slots=True)
class RawRequest:
    """What one container (or KAI's annotations) literally asked for, before defaults.

    `sources` maps each given field to the path it was read from, for error messages (a memory
    or percentage of 0 is named there but left None: HAMi reads 0 as "not given");
    `resource_keys` are the extended resources to strip from the container.
    """

    count: int | None = None
    memory_mib: int | None = None
    memory_percent: Decimal | None = None
    cores: int | None = None
    priority: int | None = None
    sources: dict[str, str] = field(default_factory=dict)
    resource_keys: tuple[str, ...] = ()

    def asks_for_gpu(self) -> bool:
        share = (self.memory_mib, self.memory_percent, self.cores, self.priority)
        memory_named = "memory_mib" in self.sources or "memory_percent" in self.sources
        return bool(self.count) or memory_named or any(v is not None for v in share)


@dataclass(slots=True)
class Problems:
    """Collects every problem of one object, so a user sees them all at once."""

    errors: list[FieldError] = field(default_factory=list)

    def add(self, path: str, reason: str) -> None:
        self.errors.append(FieldError(path, reason))

    def __bool__(self) -> bool:
        return bool(self.errors)
