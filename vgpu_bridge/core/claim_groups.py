"""Which containers of a pod share one claim: those that never run at the same time.

Kubernetes runs a pod's init containers one after another, each to its end, before any app
container starts. HAMi books on each card the larger of the largest init container's share and
the sum of the app containers' shares (`pkg/device/initContainer.go`, one maximum per card and
per dimension). A claim referenced by several containers of the pod is allocated once, so one
claim for the init containers and enough app containers books exactly that peak:

- every init container (not a sidecar: `restartPolicy: Always` runs beside the apps) with the
  same card count and priority joins one claim;
- app containers of that count and priority join it, largest first, until their sum reaches the
  init containers' peak in memory and in cores, or the next would not fit one card with those
  already joined (more than 100% of its SMs, or a whole card beside another share: the card's
  size is unknown here, so an init container with a whole card takes one app only); the others
  keep a claim of their own. The claim books per card the larger of the init peak and the
  joined apps' sum, which with the others' claims is HAMi's booking;
- a container whose own share is below the claim's gets it back through `own`: the webhook puts
  it in the container's env (`VGPU_CONTAINER_*`), and libvgpu only ever lowers to it. Joined app
  containers run together on one claim, so their own is their sum, held together.

Not pooled: a memory share in percent of a card (the claim would need one alternative per card
size and libvgpu a lowering in percent, which it does not read); a container with a different
card count or priority than the init containers. Those keep a claim of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Literal

from vgpu_bridge.core.models import GpuRequest

ContainerKind = Literal["init", "sidecar", "app"]


@dataclass(frozen=True, slots=True)
class OwnShare:
    """What a pooled container keeps per card, where it is below the claim's."""

    memory_mib: int | None  # None: the claim's memory
    cores: int | None  # None: the claim's cores


@dataclass(frozen=True, slots=True)
class ClaimGroup:
    """Containers (indices into the requests given) that share one claim booking `request`."""

    members: tuple[int, ...]
    request: GpuRequest
    own: tuple[OwnShare | None, ...]  # one per member; None: the claim's share is its own


def group_claims(requests: Sequence[tuple[GpuRequest, ContainerKind]]) -> list[ClaimGroup]:
    """One group per claim, ordered by their first member; a container alone is a group of one."""
    pooled: dict[int, ClaimGroup] = {}
    for key in dict.fromkeys(_key(r) for r, kind in requests if kind == "init" and _poolable(r)):
        group = _pool(requests, key)
        if group is not None:
            pooled.update(dict.fromkeys(group.members, group))
    groups: list[ClaimGroup] = []
    for index, (request, _) in enumerate(requests):
        group = pooled.get(index, ClaimGroup((index,), request, (None,)))
        if group.members[0] == index:
            groups.append(group)
    return groups


def _key(request: GpuRequest) -> tuple[int, int | None]:
    return request.count, request.priority


def _poolable(request: GpuRequest) -> bool:
    return request.memory_percent is None or request.whole_card_memory


def _memory(requests: Sequence[GpuRequest]) -> int | None:
    """Their memory summed; None when one of them takes the whole card."""
    if any(r.memory_mib is None for r in requests):
        return None
    return sum(r.memory_mib or 0 for r in requests)


def _cores(requests: Sequence[GpuRequest]) -> int:
    return min(100, sum(r.cores for r in requests))


def _pool(
    requests: Sequence[tuple[GpuRequest, ContainerKind]], key: tuple[int, int | None]
) -> ClaimGroup | None:
    """The claim of the init containers with this key and the apps that join them."""
    fits = [i for i, (r, _) in enumerate(requests) if _poolable(r) and _key(r) == key]
    inits = [i for i in fits if requests[i][1] == "init"]
    apps = sorted(
        (i for i in fits if requests[i][1] == "app"),
        key=lambda i: (requests[i][0].memory_mib is None, requests[i][0].memory_mib or 0),
        reverse=True,
    )
    peak = [requests[i][0] for i in inits]
    joined: list[int] = []
    for index in apps[: 1 if _memory(peak) is None else len(apps)]:
        together = [requests[i][0] for i in [*joined, index]]
        if _covers(together[:-1], peak) or not _fit_one_card(together):
            break
        joined.append(index)
    if not joined and len(inits) < 2:
        return None
    return _group(requests, inits, joined)


def _fit_one_card(apps: Sequence[GpuRequest]) -> bool:
    """Apps held together on one claim must fit one card: at most 100% of its SMs, and a whole
    card's memory only for one of them (the card's size is unknown here). An init container with
    a whole card takes one app only, for the same reason."""
    return sum(r.cores for r in apps) <= 100 and (len(apps) == 1 or _memory(apps) is not None)


def _covers(apps: Sequence[GpuRequest], inits: Sequence[GpuRequest]) -> bool:
    """True when the apps' sum is at least every init container's share, memory and cores."""
    if not apps:
        return False
    memory = _memory(apps)
    return all(
        (memory is None or (r.memory_mib is not None and r.memory_mib <= memory))
        and r.cores <= _cores(apps)
        for r in inits
    )


def _group(
    requests: Sequence[tuple[GpuRequest, ContainerKind]], inits: list[int], joined: list[int]
) -> ClaimGroup:
    """The claim books the larger of the init peak and the joined apps' sum, per dimension."""
    apps = [requests[i][0] for i in joined]
    apps_share = (_memory(apps), _cores(apps)) if apps else (0, 0)
    shares = {i: (requests[i][0].memory_mib, requests[i][0].cores) for i in inits}
    shares.update(dict.fromkeys(joined, apps_share))
    memories = [m for m, _ in shares.values()]
    memory = None if None in memories else max(m or 0 for m in memories)
    first = requests[inits[0] if inits else joined[0]][0]
    booked = replace(
        first,
        memory_mib=memory,
        memory_percent=Decimal(100) if memory is None else None,
        cores=max(c for _, c in shares.values()),
    )
    members = tuple(sorted(shares))
    return ClaimGroup(members, booked, tuple(_own(shares[i], booked) for i in members))


def _own(share: tuple[int | None, int], booked: GpuRequest) -> OwnShare | None:
    """The container's share where it is below the claim's; an SM share of 0 (no SM limit)
    cannot be lifted above the claim's limit, so it keeps the claim's."""
    memory, cores = share
    lower_memory = memory is not None and (booked.memory_mib is None or memory < booked.memory_mib)
    lower_cores = 0 < cores < booked.cores
    if not (lower_memory or lower_cores):
        return None
    return OwnShare(memory if lower_memory else None, cores if lower_cores else None)
