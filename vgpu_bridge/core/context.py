"""Everything a translation depends on besides the object itself."""

from __future__ import annotations

from dataclasses import dataclass, field

from vgpu_bridge.core.config import TranslatorConfig
from vgpu_bridge.core.inventory import Inventory
from vgpu_bridge.core.profiles import DEFAULT, DriverProfile


@dataclass(frozen=True, slots=True)
class TranslationContext:
    config: TranslatorConfig = field(default_factory=TranslatorConfig)
    profile: DriverProfile = DEFAULT
    inventory: Inventory = field(default_factory=Inventory)
