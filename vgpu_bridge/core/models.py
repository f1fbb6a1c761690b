"""The request model every input format (HAMi, Volcano, KAI) is read into."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from vgpu_bridge.core.errors import FieldError


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuRequest:
    """One container's GPU share after normalisation: `count` cards, each with this share.

    Built only from values core has already checked; a value out of range is a bug in core, so it
    raises ValueError at once instead of reaching a claim.
    """

    count: int
    memory_mib: int | None = None
    memory_percent: Decimal | None = None
    cores: int
    priority: int | None = None

    def __post_init__(self) -> None:
        if self.memory_percent is not None and not isinstance(self.memory_percent, Decimal):
            object.__setattr__(self, "memory_percent", Decimal(self.memory_percent))
        ranges = (  # (field, its value, lowest, highest, None allowed)
            ("count", self.count, 1, None, False),
            ("memory_mib", self.memory_mib, 1, None, True),
            ("cores", self.cores, 0, 100, False),
            ("priority", self.priority, 0, 1, True),
        )
        for name, value, low, high, optional in ranges:
            if value is None and optional:
                continue
            if type(value) is not int or value < low or (high is not None and value > high):
                raise ValueError(f"GpuRequest.{name}: {value!r} is out of range")
        percent = self.memory_percent
        if percent is not None and not 0 < percent <= 100:
            raise ValueError(f"GpuRequest.memory_percent: {percent} is not in (0, 100]")

    @property
    def whole_card_memory(self) -> bool:
        """True when the memory of each card is the container's alone."""
        return self.memory_mib is None and self.memory_percent == 100


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceFilter:
    """Pod-level device choice: product-name substrings and exact uuids to use or avoid."""

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
