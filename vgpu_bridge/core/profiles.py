"""Driver profiles: the names a DRA driver uses, as data. Nothing else in core hard-codes them.

Names contain `gpu` on purpose: KAI counts a claim as GPU quota only when its DeviceClass (and the
slice's driver) name contains `gpu`; over-counting a share beats escaping the quota.

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

from dataclasses import dataclass, replace

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
    cores_capacity: str = "cores"
    # the core booking (module doc); None when the driver publishes none (HAMi's driver)
    core_booking_capacity: str | None = None
    # whether the driver reads our opaque claim config (`opaque_config.GpuShareConfig`)
    share_config: bool = False

    @property
    def config_api_version(self) -> str | None:
        """apiVersion of the opaque config this driver reads; None when it reads none."""
        return API_VERSION if self.share_config else None

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
PROFILES = {p.name: p for p in (DEFAULT, HAMI)}
# A driver name is a DNS subdomain (resource.k8s.io): lower-case labels joined by dots.
DRIVER_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DRIVER_NAME_MAX_LENGTH = 253


def our_profile(driver: str) -> DriverProfile:
    """Our driver under the name it was installed with; its DeviceClass carries the same name."""
    return replace(DEFAULT, driver=driver, device_class=driver)


def profile_named(name: str, *, our_driver: str = DEFAULT.driver) -> DriverProfile:
    """The profile called `name` (`default` under `our_driver`); KeyError lists the known ones."""
    if name == DEFAULT.name:
        return our_profile(our_driver)
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})") from None
