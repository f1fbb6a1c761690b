"""A ResourceClaim's shares of this node's GPUs, read from its allocation (pure: no I/O).

Everything is checked and nothing is guessed: the claim must be the one the kubelet named (uid),
allocated, on this node's pool, for devices we publish, and every share must carry the
`consumedCapacity` the scheduler tracked. A missing share size is an error, never a default
(HAMi's driver falls back to 60% SM and the whole card).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from vgpu_bridge.core.opaque_config import GpuShareConfig, ShareConfigError, parse_share_config
from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.core.quantity import MiB, QuantityError, parse_quantity
from vgpu_bridge.node.gpus import Gpu

Json = dict[str, Any]


class ClaimError(ValueError):
    """This claim cannot be prepared here; the message says why (returned to the kubelet)."""


@dataclass(frozen=True, slots=True)
class Share:
    """One allocated share of one GPU."""

    request: str  # the base request name (containers reference requests by it)
    pool: str
    device: str
    share_id: str | None
    gpu: Gpu
    memory: int  # bytes
    cores: int  # SM percent

    @property
    def memory_mib(self) -> int:
        return self.memory // MiB


@dataclass(frozen=True, slots=True)
class ClaimShares:
    uid: str
    namespace: str
    name: str
    shares: tuple[Share, ...]
    priority: int | None


def claim_shares(
    claim: Json,
    *,
    uid: str,
    node: str,
    profile: DriverProfile,
    gpus: Mapping[str, Gpu],
) -> ClaimShares:
    """The shares of our driver in `claim`, in allocation order; ClaimError when unusable."""
    allocation, ref = checked_allocation(claim, uid=uid, node=node)
    meta = claim.get("metadata") or {}
    devices = allocation.get("devices") or {}
    shares = tuple(
        _share(result, index, node=node, profile=profile, gpus=gpus, ref=ref)
        for index, result in enumerate(devices.get("results") or [])
        if result.get("driver") == profile.driver
    )
    if not shares:
        raise ClaimError(f"{ref} has no device of driver {profile.driver}: not ours to prepare")
    priority = _priority(devices.get("config") or [], profile, ref)
    return ClaimShares(uid, meta.get("namespace", ""), meta.get("name", ""), shares, priority)


def checked_allocation(claim: Json, *, uid: str, node: str) -> tuple[Json, str]:
    """The claim's allocation, and how errors name the claim; ClaimError unless `claim` is the
    one the kubelet named (`uid`), allocated, and on `node` where its allocation names a node."""
    meta = claim.get("metadata") or {}
    ref = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    if meta.get("uid") != uid:
        raise ClaimError(f"{ref} has uid {meta.get('uid')}, not {uid}: it was replaced")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"{ref} is not allocated")
    _check_node(allocation, node, ref)
    return allocation, ref


def _check_node(allocation: Json, node: str, ref: str) -> None:
    """A node-local allocation names its node in a `metadata.name` field selector."""
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and node not in (field.get("values") or []):
                raise ClaimError(f"{ref} is allocated to node {field.get('values')}, not {node}")


def _share(
    result: Json,
    index: int,
    *,
    node: str,
    profile: DriverProfile,
    gpus: Mapping[str, Gpu],
    ref: str,
) -> Share:
    where = f"{ref}: status.allocation.devices.results[{index}]"
    pool, device = result.get("pool"), result.get("device")
    if pool != node:
        raise ClaimError(f"{where}: pool {pool!r} is not this node's pool {node!r}")
    gpu = gpus.get(str(device))
    if gpu is None:
        raise ClaimError(f"{where}: device {device!r} is not a GPU of this node")
    consumed = result.get("consumedCapacity") or {}
    memory = _capacity(consumed, profile.memory_capacity, profile, where)
    cores_capacity = profile.cores_capacity or "cores"  # our driver always books cores
    cores = _capacity(consumed, cores_capacity, profile, where)
    if memory <= 0 or memory > gpu.memory or memory % MiB:
        raise ClaimError(f"{where}: memory share {memory} is not 1Mi..{gpu.memory} in 1Mi steps")
    if not 0 <= cores <= 100 or cores != cores.to_integral_value():
        raise ClaimError(f"{where}: cores share {cores} is not a whole percent 0..100")
    request = str(result.get("request", "")).split("/", 1)[0]
    share_id = result.get("shareID") or None
    return Share(request, pool, gpu.device_name, share_id, gpu, int(memory), int(cores))


def _capacity(consumed: Json, name: str, profile: DriverProfile, where: str) -> Decimal:
    hint = "is DRAConsumableCapacity on?); refusing to guess one"
    return consumed_quantity(consumed, name, driver=profile.driver, where=where, hint=hint)


def consumed_quantity(consumed: Json, name: str, *, driver: str, where: str, hint: str) -> Decimal:
    """`consumedCapacity[name]` (plain or `<driver>/<name>`) of a result; ClaimError when the
    scheduler recorded none (`hint` ends that message) or it is no quantity."""
    value = consumed.get(name, consumed.get(f"{driver}/{name}"))
    if value is None:
        raise ClaimError(
            f"{where}: no consumedCapacity[{name}]: the scheduler did not record this share's "
            f"size ({hint}"
        )
    try:
        return parse_quantity(value)
    except QuantityError as exc:
        raise ClaimError(f"{where}: consumedCapacity[{name}]: {exc}") from None


def _priority(configs: list[Json], profile: DriverProfile, ref: str) -> int | None:
    """`priority` of our opaque config (`GpuShareConfig`); the last one that applies wins."""
    return share_config(configs, driver=profile.driver, ref=ref).priority


def share_config(configs: Any, *, driver: str, ref: str) -> GpuShareConfig:
    """The claim's opaque configs of `driver` (ours), merged: the last one that sets a field
    wins it. ClaimError naming the entry for a config we cannot honour."""
    priority = cores = None
    for index, entry in enumerate(configs if isinstance(configs, list) else []):
        opaque = (entry.get("opaque") if isinstance(entry, dict) else None) or {}
        if opaque.get("driver") != driver:
            continue
        config = opaque_share_config(opaque, index, ref)
        priority = config.priority if config.priority is not None else priority
        cores = config.cores if config.cores is not None else cores
    return GpuShareConfig(priority=priority, cores=cores)


def opaque_share_config(opaque: Json, index: int, ref: str) -> GpuShareConfig:
    """Our opaque config at `config[index]`, parsed; one place, so both our driver and the
    NVIDIA enforcer refuse a bad one with the same message naming the field."""
    where = f"{ref}: status.allocation.devices.config[{index}].opaque.parameters"
    try:
        return parse_share_config(opaque.get("parameters") or {})
    except ShareConfigError as error:
        raise ClaimError(f"{where}: {error}") from None
