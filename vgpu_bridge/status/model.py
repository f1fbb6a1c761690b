"""What the status view shows, as frozen values (sizes in bytes, cores in SM percent)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Share:
    """One allocated device of one claim: who holds it and what it booked."""

    namespace: str
    pod: str  # "" when no pod of the listed ones reserves the claim
    containers: tuple[str, ...]
    claim: str
    claim_uid: str
    node: str
    device: str
    memory: int | None  # booked bytes; None when the allocation recorded none
    cores: int | None  # booked SM percent; None when the allocation recorded none
    priority: int | None  # our opaque config's priority (0 high, 1 low), None when unset
    used_memory: int | None = None  # live, from the agent's metrics; None when unknown
    sm_utilisation: int | None = None  # live SM percent its processes last measured; None: unknown
    cores_units: int | None = None  # NVIDIA's shares of N it booked; None: not recorded


@dataclass(frozen=True)
class Card:
    """One GPU of a ResourceSlice of our driver, with the shares allocated on it."""

    node: str
    device: str
    uuid: str
    product: str
    memory: int
    cores: int
    shares: tuple[Share, ...]
    booked_memory: int = 0  # by every claim on the card, also those of namespaces not shown
    booked_cores: int = 0
    used_memory: int | None = None  # live sum over its claims; None when no agent was read

    @property
    def free_memory(self) -> int:
        return max(self.memory - self.booked_memory, 0)

    @property
    def free_cores(self) -> int:
        return max(self.cores - self.booked_cores, 0)


@dataclass(frozen=True)
class PendingPod:
    """A pod with resource claims that no scheduler has placed yet, and the scheduler's word."""

    namespace: str
    pod: str
    scheduler: str
    reason: str


@dataclass(frozen=True)
class Report:
    """Cards by node and device; shares whose card is not in view (slices unreadable or gone);
    pending pods; notes that say what could not be read."""

    cards: tuple[Card, ...]
    unplaced: tuple[Share, ...]
    pending: tuple[PendingPod, ...]
    notes: tuple[str, ...] = ()
