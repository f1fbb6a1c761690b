"""Under the nvidia profile: what would give a container a share of NVIDIA's driver that no one
holds to its limits, so that the webhook refuses it.

NVIDIA's DRA driver books shares but enforces no memory or SM limit; our enforcer does, and only
for claims that also ask for its device. NVIDIA's chart maps the extended resource
`nvidia.com/gpu` to its DeviceClass (KEP-5004, `extendedResourceName`), and every class has the
implicit name `deviceclass.resource.kubernetes.io/<class>`: a pod that still asks for either
when it reaches the API (opted out of translation, or asking only the implicit name) would get a
card of gpu.nvidia.com from kube-scheduler's own claim, without our enforcer. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_bridge.core import DriverProfile, TranslatorConfig
from vgpu_bridge.core.booking import IMPLICIT_EXTENDED_RESOURCE_PREFIX
from vgpu_bridge.core.errors import FieldError
from vgpu_bridge.core.quantity import QuantityError, parse_quantity
from vgpu_bridge.core.requests import containers
from vgpu_bridge.core.workloads import pod_templates

#: the extended resource NVIDIA's chart gives its DeviceClass gpu.nvidia.com (whatever HAMi's
#: count is called in this cluster)
NVIDIA_EXTENDED_RESOURCE = "nvidia.com/gpu"


def unenforced_resource_names(profile: DriverProfile, config: TranslatorConfig) -> tuple[str, ...]:
    """The extended resources that would reach the profile's DeviceClass without our enforcer;
    () where the card's driver enforces (every profile but nvidia)."""
    if profile.enforcer_driver is None:
        return ()
    names = (
        NVIDIA_EXTENDED_RESOURCE,
        config.resource_count_name,
        IMPLICIT_EXTENDED_RESOURCE_PREFIX + profile.device_class,
    )
    return tuple(dict.fromkeys(names))


def unenforced_resources(
    obj: Mapping[str, Any], names: tuple[str, ...], *, device_class: str, enforcer: str
) -> list[FieldError]:
    """Each container resource of `obj`'s pod templates that asks for one of `names` (a
    quantity other than zero, or no quantity at all), as a FieldError that says why."""
    if not names:
        return []
    found = []
    for template in pod_templates(obj):
        for container in containers(template):
            resources = container.body.get("resources")
            for kind in ("limits", "requests"):
                listed = resources.get(kind) if isinstance(resources, Mapping) else None
                for name in names:
                    if isinstance(listed, Mapping) and _asks(listed.get(name)):
                        path = f"{container.path}.resources.{kind}[{name}]"
                        found.append(FieldError(path, _reason(device_class, enforcer)))
    return found


def _asks(value: object) -> bool:
    if value is None:
        return False
    try:
        return parse_quantity(value) != 0
    except QuantityError:
        return True


def _reason(device_class: str, enforcer: str) -> str:
    return (
        f"kube-scheduler would allocate this from DeviceClass {device_class} as an extended "
        f"resource, without our enforcer ({enforcer}): NVIDIA's DRA driver enforces no memory "
        "or SM limit, so no limit would hold; let the webhook translate the pod (no opt-out "
        "label) or ask for a claim that requests the enforcer too"
    )
