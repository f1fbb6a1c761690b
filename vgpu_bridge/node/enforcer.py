"""Enforcer mode: the limits of NVIDIA's shares, read from a claim's allocation (no I/O here).

On a node where NVIDIA's DRA driver (`gpu.nvidia.com`, `--consumable-shares`) publishes and
prepares the cards, the agent publishes one device per node, `enforcer` (`enforcer_device`),
which the webhook asks for in every claim beside NVIDIA's share (request `vgpu-limits`). The
kubelet then calls our Prepare for the claim too, and `enforced_shares` reads what NVIDIA's
share is: each result of `gpu.nvidia.com` (pool = this node), its card in NVIDIA's slice
(`nvidia_slices`: uuid, memory, shares N), the capacity the scheduler consumed, and our opaque
config (`GpuShareConfig`: `cores`, `priority`). The limits (docs/nvidia-driver.md):

- memory = consumedCapacity `memory`: required, 1Mi..the card in 1Mi steps;
- in NVIDIA's `<N>` mode (the card has a `shares` capacity) the share's percent of the card is
  100 when it holds all N shares, else max(1, floor(s*100/N)) for its s shares (required); the SM
  limit is then the config's cores, at most that percent, none (0) for cores 0, and that
  percent when the config has no cores;
- without `shares` (NVIDIA's `memory` and `unlimited` modes) the SM limit is the config's
  cores (none: 0 = no SM limit).

Fail closed: exactly one `enforcer` result of this node, at least one NVIDIA result, every NVIDIA
result a full GPU of this node's pool; anything else is a ClaimError and the claim does not
start. No share without its limits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from vgpu_bridge.core.opaque_config import GpuShareConfig
from vgpu_bridge.core.profiles import NVIDIA_DRIVER
from vgpu_bridge.core.quantity import MiB
from vgpu_bridge.node.allocation import (
    ClaimError,
    ClaimShares,
    Share,
    checked_allocation,
    consumed_quantity,
    share_config,
)
from vgpu_bridge.node.nvidia_slices import (
    MEMORY_CAPACITY,
    SHARES_CAPACITY,
    CardProblem,
    NvidiaCard,
)

Json = dict[str, Any]
ENFORCER_DEVICE = "enforcer"  # never NVIDIA's MIG name regex ^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$
MAX_RESULTS = 32  # the API server's bound on a claim's results


@dataclass(frozen=True, slots=True)
class EnforcedClaim:
    """A claim's NVIDIA shares with the limits this agent holds them to, and our own result."""

    shares: ClaimShares
    share_id: str | None  # the enforcer result's shareID (the device allows many allocations)


def enforcer_device(enforces: str = NVIDIA_DRIVER) -> Json:
    """The node's one enforcer device: shareable by any number of claims, no capacity, and an
    attribute naming the driver whose shares it enforces."""
    return {
        "name": ENFORCER_DEVICE,
        "allowMultipleAllocations": True,
        "attributes": {"enforces": {"string": enforces}},
    }


def enforced_shares(
    claim: Json,
    *,
    uid: str,
    node: str,
    driver: str,
    card: Callable[[str], NvidiaCard],
) -> EnforcedClaim:
    """NVIDIA's shares in `claim` and their limits (module doc); `driver` is our enforcer's,
    `card` looks a device of NVIDIA's pool up (`NvidiaCards.card`). ClaimError when unusable."""
    allocation, ref = checked_allocation(claim, uid=uid, node=node)
    devices = allocation.get("devices") or {}
    results = devices.get("results") or []
    if not isinstance(results, list) or len(results) > MAX_RESULTS:
        raise ClaimError(f"{ref}: status.allocation.devices.results: not a list of results")
    share_id = _enforcer_result(results, node=node, driver=driver, ref=ref)
    config = share_config(devices.get("config") or [], driver=driver, ref=ref)
    shares = tuple(
        _share(result, index, node=node, config=config, card=card, ref=ref)
        for index, result in enumerate(results)
        if isinstance(result, dict) and result.get("driver") == NVIDIA_DRIVER
    )
    if not shares:
        raise ClaimError(f"{ref} has no device of {NVIDIA_DRIVER}: nothing to enforce")
    meta = claim.get("metadata") or {}
    claim_shares = ClaimShares(uid, meta.get("namespace", ""), meta.get("name", ""), shares,
                               config.priority)  # fmt: skip
    return EnforcedClaim(claim_shares, share_id)


def _enforcer_result(results: list[Any], *, node: str, driver: str, ref: str) -> str | None:
    """The shareID of the claim's one result of our driver, which must be this node's enforcer."""
    ours = [
        (i, r) for i, r in enumerate(results) if isinstance(r, dict) and r.get("driver") == driver
    ]
    if len(ours) != 1:
        raise ClaimError(f"{ref} has {len(ours)} devices of {driver}, not exactly one")
    index, result = ours[0]
    where = f"{ref}: status.allocation.devices.results[{index}]"
    if result.get("pool") != node or result.get("device") != ENFORCER_DEVICE:
        raise ClaimError(f"{where}: {_named(result)} is not this node's {ENFORCER_DEVICE} "
                         f"({node}/{ENFORCER_DEVICE})")  # fmt: skip
    share_id = result.get("shareID")
    return str(share_id)[:64] if share_id else None


def _named(result: Json) -> str:
    return f"{str(result.get('pool'))[:64]}/{str(result.get('device'))[:64]}"


def _share(
    result: Json,
    index: int,
    *,
    node: str,
    config: GpuShareConfig,
    card: Callable[[str], NvidiaCard],
    ref: str,
) -> Share:
    where = f"{ref}: status.allocation.devices.results[{index}]"
    pool, device = result.get("pool"), result.get("device")
    if pool != node:
        raise ClaimError(
            f"{where}: {NVIDIA_DRIVER} pool {str(pool)[:64]!r} is not this node's pool "
            f"{node!r}: a share of another node's card cannot be enforced here"
        )
    try:
        found = card(str(device))
    except CardProblem as problem:
        raise ClaimError(f"{where}: {problem}") from None
    consumed = result.get("consumedCapacity")
    consumed = consumed if isinstance(consumed, dict) else {}
    memory = _memory(consumed, found, where)
    cores = _sm_limit(consumed, found, config.cores, where)
    request = str(result.get("request", "")).split("/", 1)[0][:64]
    share_id = str(result.get("shareID") or "")[:64] or None
    return Share(request, node, found.device, share_id, found.gpu, memory, cores)


def _consumed(consumed: Json, name: str, where: str) -> Decimal:
    return consumed_quantity(consumed, name, driver=NVIDIA_DRIVER, where=where,
                             hint="is DRAConsumableCapacity on, and NVIDIA's "
                                  "--consumable-shares?); no share without its limits")  # fmt: skip


def _memory(consumed: Json, card: NvidiaCard, where: str) -> int:
    memory = _consumed(consumed, MEMORY_CAPACITY, where)
    if not 0 < memory <= card.memory or memory % MiB:
        raise ClaimError(f"{where}: consumedCapacity[{MEMORY_CAPACITY}] {memory} is not "
                         f"1Mi..{card.memory} bytes in 1Mi steps")  # fmt: skip
    return int(memory)


def _sm_limit(consumed: Json, card: NvidiaCard, cores: int | None, where: str) -> int:
    """The SM limit in percent (0: none), from the shares held and the cores asked (module doc)."""
    if card.shares is None:
        return cores or 0
    shares = _consumed(consumed, SHARES_CAPACITY, where)
    if shares < 1 or shares != shares.to_integral_value():
        raise ClaimError(f"{where}: consumedCapacity[{SHARES_CAPACITY}] {shares} is not a whole "
                         f"number of shares 1..{card.shares}")  # fmt: skip
    percent = 100 if shares >= card.shares else max(1, int(shares * 100 // card.shares))
    if cores is None:
        return percent
    return min(cores, percent) if cores else 0
