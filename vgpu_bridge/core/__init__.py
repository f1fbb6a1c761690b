"""The pure translator: HAMi / Volcano / KAI GPU requests in, DRA claim templates out. No I/O."""

from vgpu_bridge.core.config import TranslatorConfig
from vgpu_bridge.core.context import TranslationContext
from vgpu_bridge.core.errors import FieldError, InvalidRequest, TranslationError
from vgpu_bridge.core.inventory import Inventory
from vgpu_bridge.core.models import DeviceFilter, GpuRequest
from vgpu_bridge.core.plan import Plan
from vgpu_bridge.core.profiles import (
    DEFAULT,
    ENFORCER_DRIVER,
    ENFORCER_REQUEST,
    HAMI,
    NVIDIA,
    NVIDIA_DRIVER,
    PROFILES,
    DriverProfile,
    nvidia_profile,
    profile_named,
)
from vgpu_bridge.core.translate import translate

__all__ = [
    "DEFAULT",
    "ENFORCER_DRIVER",
    "ENFORCER_REQUEST",
    "HAMI",
    "NVIDIA",
    "NVIDIA_DRIVER",
    "PROFILES",
    "DeviceFilter",
    "DriverProfile",
    "FieldError",
    "GpuRequest",
    "InvalidRequest",
    "Inventory",
    "Plan",
    "TranslationContext",
    "TranslationError",
    "TranslatorConfig",
    "nvidia_profile",
    "profile_named",
    "translate",
]
