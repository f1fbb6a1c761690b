"""Driver profiles: the names a DRA driver uses, as data. Nothing else in core hard-codes them.

Names contain `gpu` on purpose: KAI counts a claim as GPU quota only when its DeviceClass (and the
slice's driver) name contains `gpu`; over-counting a share beats escaping the quota.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class DriverProfile(BaseModel):
    """What claims for one DRA driver look like."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    driver: str
    device_class: str
    uuid_attribute: str = "uuid"
    product_attribute: str = "productName"
    memory_capacity: str = "memory"
    cores_capacity: str = "cores"
    # apiVersion of our opaque claim config; None when the driver would not understand it.
    config_api_version: str | None = None
    config_kind: str = "GpuShareConfig"

    def attribute(self, name: str) -> str:
        """A CEL reference to one of this driver's device attributes."""
        return f'device.attributes["{self.driver}"].{name}'

    def capacity(self, name: str) -> str:
        """A CEL reference to one of this driver's device capacities (the card's total)."""
        return f'device.capacity["{self.driver}"].{name}'

    def qualified(self, name: str) -> str:
        """`<driver>/<name>`, as constraints spell attribute names."""
        return f"{self.driver}/{name}"


DEFAULT = DriverProfile(
    name="default",
    driver="gpu.vgpu-bridge.io",
    device_class="gpu.vgpu-bridge.io",
    config_api_version="gpu.vgpu-bridge.io/v1alpha1",
)
HAMI = DriverProfile(
    name="hami",
    driver="hami-core-gpu.project-hami.io",
    device_class="hami-core-gpu.project-hami.io",
)
PROFILES = {p.name: p for p in (DEFAULT, HAMI)}


def profile_named(name: str) -> DriverProfile:
    """The profile called `name`; KeyError lists the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})") from None
