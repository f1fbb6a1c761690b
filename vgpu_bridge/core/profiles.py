"""Driver profiles: the names a DRA driver uses, as data. Nothing else in core hard-codes them.

Names contain `gpu` on purpose: KAI counts a claim as GPU quota only when its DeviceClass (and the
slice's driver) name contains `gpu`; over-counting a share beats escaping the quota.

The `nvidia` profile targets NVIDIA's DRA driver (`gpu.nvidia.com`) with `ConsumableShares` on
(`nvidia_profile`, one per value of its `--consumable-shares` flag). NVIDIA's driver books the
share (`memory`, and in the `<N>` mode `shares` out of N per card) but enforces nothing, so each
claim also asks, as request `vgpu-limits` (`ENFORCER_REQUEST`), for our node agent's per-node
enforcer device (driver `enforcer.vgb.io`), whose Prepare holds the container to its share. The
enforcer's name has no `gpu` in it, on purpose and unlike ours: KAI would otherwise count the
enforcer request as a second GPU in the queue's quota, and the enforcer device of every node as
node GPU capacity. `gpu.nvidia.com` itself does contain `gpu`, so KAI counts each NVIDIA share as
a whole GPU (over-counting, as above).

The core booking (`core_booking_capacity`) is how HAMi's two exclusivity rules become capacity
arithmetic the DRA allocator does: the card has `100k` of it, a share with an SM limit of C%
books `C*1000` and a share without an SM limit books 1. So `gpucores: 100` (`100k`) fits only
on a card no one uses and leaves room for nothing, and a share without an SM limit does not fit
on a card whose cores are fully booked (HAMi's ExclusiveDeviceAllocateConflict and
CardComputeUnitsExhausted). `cores` stays the SM limit in percent that the node agent reads.

HAMi's driver publishes no core booking: its `cores` and `memory` are what it writes into the
container as the limits. There `gpucores: 100` books the whole card instead (core/translate.py,
with a warning: the container's memory limit becomes the card's), which keeps the first rule; the
second cannot be said (a core booked by a share without an SM limit would be its SM limit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Final

from vgpu_bridge.core.opaque_config import API_VERSION


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverProfile:
    """What claims for one DRA driver look like."""

    name: str
    driver: str
    device_class: str
    uuid_attribute: str = "uuid"
    product_attribute: str = "productName"
    memory_capacity: str = "memory"
    # the capacity a share's SM part is booked in; None where the driver books none
    # (NVIDIA's `memory` and `unlimited` modes): then cores are an SM limit only
    cores_capacity: str | None = "cores"
    # N of NVIDIA's `<N>` mode: a card holds N shares and `cores_capacity` counts them;
    # None: `cores_capacity` (if any) is in percent of the card
    shares_per_card: int | None = None
    # whether a request that leaves memory out gets the whole card (the request policy's
    # default); False where the default is 0 bytes (NVIDIA's `unlimited` and `<N>` modes)
    memory_default_whole_card: bool = True
    # the core booking (module doc); None when the driver publishes none (HAMi's driver)
    core_booking_capacity: str | None = None
    # whether the driver reads our opaque claim config (`opaque_config.GpuShareConfig`)
    share_config: bool = False
    # the driver of our per-node enforcer asked for beside every share (module doc); its
    # DeviceClass has the same name. None: the card's driver enforces (ours) or no one does
    enforcer_driver: str | None = None

    def cores_percent(self, booked: int) -> int:
        """The SM percent of a card that `booked` units of `cores_capacity` are, as the node
        agent sets the SM limit: shares of N rounded down (`shares*100/N`) but at least 1 (a
        share is never left without SMs) and 100 for N or more; or the number itself where it
        is a percent already. A card's shares are summed first and converted once, so that N
        shares of one each fill it (100, not N times the rounded-down percent)."""
        if self.shares_per_card is None or booked <= 0:
            return booked
        if booked >= self.shares_per_card:
            return 100
        return max(1, booked * 100 // self.shares_per_card)

    @property
    def config_api_version(self) -> str | None:
        """apiVersion of the opaque config this driver, or its enforcer, reads; None: none."""
        return API_VERSION if self.share_config or self.enforcer_driver else None

    @property
    def books_cores(self) -> bool:
        """Whether a share's SMs are booked on the card, so that `gpucores: 100` keeps it alone:
        by our core booking, or by NVIDIA's shares (N of N)."""
        return self.core_booking_capacity is not None or self.shares_per_card is not None

    def cores_request(self, cores: int) -> dict[str, str]:
        """The capacity request for an SM share of `cores` percent: the percent itself, or
        shares of N rounded up (1..N; none for 0: the request policy's default, one share), or
        nothing where the driver books no cores."""
        if self.cores_capacity is None:
            return {}
        if self.shares_per_card is None:
            return {self.cores_capacity: str(cores)}
        if cores == 0:
            return {}
        return {self.cores_capacity: str(-(-cores * self.shares_per_card // 100))}

    def core_booking(self, cores: int) -> dict[str, str]:
        """The core booking a share of `cores` percent asks for (none where the driver has none)."""
        if self.core_booking_capacity is None:
            return {}
        return {self.core_booking_capacity: core_booking_quantity(cores)}

    def attribute(self, name: str) -> str:
        """A CEL reference to one of this driver's device attributes."""
        return f'device.attributes["{self.driver}"].{name}'

    def capacity(self, name: str) -> str:
        """A CEL reference to one of this driver's device capacities (the card's total)."""
        return f'device.capacity["{self.driver}"].{name}'

    def qualified(self, name: str) -> str:
        """`<driver>/<name>`, as constraints spell attribute names."""
        return f"{self.driver}/{name}"


def core_booking_quantity(cores: int) -> str:
    """The core booking of `cores` percent, a canonical quantity (as the API server prints it):
    1000 per percent (100 → "100k"), and 1 for no SM limit (0 → "1"), less than any percent."""
    if not 0 <= cores <= 100:
        raise ValueError(f"cores {cores} is not a percent 0..100")
    return f"{cores}k" if cores else "1"


DEFAULT = DriverProfile(
    name="default",
    driver="gpu.vgpu-bridge.io",
    device_class="gpu.vgpu-bridge.io",
    core_booking_capacity="milliCores",
    share_config=True,
)
HAMI = DriverProfile(
    name="hami",
    driver="hami-core-gpu.project-hami.io",
    device_class="hami-core-gpu.project-hami.io",
)
# A driver name is a DNS subdomain (resource.k8s.io): lower-case labels joined by dots.
DRIVER_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DRIVER_NAME_MAX_LENGTH = 253

NVIDIA_DRIVER: Final = "gpu.nvidia.com"
ENFORCER_DRIVER: Final = "enforcer.vgb.io"
ENFORCER_REQUEST: Final = "vgpu-limits"  # the claim's request for the enforcer device
# NVIDIA's --consumable-shares values that share a card (`disabled`, its default, does not)
NVIDIA_SHARE_MODES: Final = ("memory", "unlimited")
MAX_SHARES_PER_CARD: Final = 10_000_000  # a bound, far above any card's N


def nvidia_profile(
    consumable_shares: str = "100", *, enforcer_driver: str = ENFORCER_DRIVER
) -> DriverProfile:
    """NVIDIA's driver run with `--consumable-shares=<consumable_shares>` (`memory`, `unlimited`
    or a positive integer N), its shares enforced by our `enforcer_driver`; ValueError names a
    value that is none of those, or an enforcer name KAI would count as a GPU."""
    shares = _shares_per_card(consumable_shares)
    if not _is_driver_name(enforcer_driver) or "gpu" in enforcer_driver:
        raise ValueError(
            f"enforcer driver {enforcer_driver!r}: must be a lower-case DNS subdomain without "
            "'gpu' in it (KAI counts every driver and DeviceClass named with 'gpu' as a GPU)"
        )
    return DriverProfile(
        name="nvidia",
        driver=NVIDIA_DRIVER,
        device_class=NVIDIA_DRIVER,
        cores_capacity=None if shares is None else "shares",
        shares_per_card=shares,
        memory_default_whole_card=consumable_shares == "memory",
        enforcer_driver=enforcer_driver,
    )


def _shares_per_card(consumable_shares: str) -> int | None:
    """N of the `<N>` mode, None for `memory`/`unlimited`; ValueError for anything else."""
    if consumable_shares in NVIDIA_SHARE_MODES:
        return None
    if consumable_shares.isascii() and consumable_shares.isdigit() and len(consumable_shares) < 10:
        shares = int(consumable_shares)
        if 1 <= shares <= MAX_SHARES_PER_CARD:
            return shares
    raise ValueError(
        f"consumable shares {consumable_shares[:40]!r}: not a --consumable-shares mode in which "
        f"NVIDIA's driver shares a card: memory, unlimited or a whole number of shares "
        f"1..{MAX_SHARES_PER_CARD} (its default, disabled, shares none)"
    )


def _is_driver_name(name: str) -> bool:
    return len(name) <= DRIVER_NAME_MAX_LENGTH and re.match(DRIVER_NAME_PATTERN, name) is not None


NVIDIA = nvidia_profile()
PROFILES = {p.name: p for p in (DEFAULT, HAMI, NVIDIA)}


def our_profile(driver: str) -> DriverProfile:
    """Our driver under the name it was installed with; its DeviceClass carries the same name."""
    return replace(DEFAULT, driver=driver, device_class=driver)


def profile_named(
    name: str,
    *,
    our_driver: str = DEFAULT.driver,
    nvidia_consumable_shares: str = "100",
    enforcer_driver: str = ENFORCER_DRIVER,
) -> DriverProfile:
    """The profile called `name` (`default` under `our_driver`, `nvidia` in the
    `nvidia_consumable_shares` mode with `enforcer_driver`); KeyError lists the known ones."""
    if name == DEFAULT.name:
        return our_profile(our_driver)
    if name == NVIDIA.name:
        return nvidia_profile(nvidia_consumable_shares, enforcer_driver=enforcer_driver)
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})") from None
