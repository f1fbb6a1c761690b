"""Everything a translation depends on besides the object itself."""

from __future__ import annotations

from dataclasses import dataclass, field

from vgpu_bridge.core.config import TranslatorConfig
from vgpu_bridge.core.inventory import Inventory
from vgpu_bridge.core.profiles import DEFAULT, DriverProfile


@dataclass(frozen=True, slots=True)
class TranslationContext:
    """What a translation reads besides the object: settings, driver profile, card sizes."""

    config: TranslatorConfig = field(default_factory=TranslatorConfig)
    profile: DriverProfile = DEFAULT
    inventory: Inventory = field(default_factory=Inventory)
