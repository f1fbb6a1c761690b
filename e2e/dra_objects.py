"""Builders for the DRA objects and pods the e2e scenarios create (plain JSON, resource.k8s.io/v1).

Kept apart from the product code on purpose: these are hand-written *inputs* describing a fake
driver, not what vgpu-bridge generates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal

from e2e.cluster.client import Json

RESOURCE_V1 = "resource.k8s.io/v1"
_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}


def quantity(text: str | int) -> Decimal:
    """A Kubernetes quantity as a number (``"10Gi"`` → 10737418240); compare these, not strings."""
    match = _QUANTITY.match(str(text))
    if match is None or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {text!r}")
    return Decimal(match.group(1)) * _SUFFIX[match.group(2)]


def device_class(name: str, *, driver: str, extended_resource_name: str = "") -> Json:
    """Selects the driver's shareable devices only; with ``extended_resource_name`` it also serves
    pods asking for that extended resource (KEP-5004), as the chart's
    ``deviceClass.extendedResourceName`` makes it."""
    expression = f'device.driver == "{driver}" && device.allowMultipleAllocations == true'
    spec: Json = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def shareable_gpu(name: str, *, memory: str, cores: int = 100) -> Json:
    """A device many claims may share: ``memory`` in 1Gi steps (default 1Gi), ``cores`` 1..100."""
    return {
        "name": name,
        "allowMultipleAllocations": True,
        "attributes": {"productName": {"string": "E2E Fake GPU"}, "uuid": {"string": f"{name}"}},
        "capacity": {
            "memory": {
                "value": memory,
                "requestPolicy": {
                    "default": "1Gi",
                    "validRange": {"min": "1Gi", "step": "1Gi", "max": memory},
                },
            },
            "cores": {
                "value": str(cores),
                "requestPolicy": {
                    "default": str(cores),
                    "validRange": {"min": "1", "step": "1", "max": str(cores)},
                },
            },
        },
    }


def resource_slice(name: str, *, driver: str, node: str, devices: list[Json]) -> Json:
    """One slice holding the whole pool of ``node``."""
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def share_template(name: str, *, device_class_name: str, capacity: Mapping[str, str]) -> Json:
    """A claim template asking for one share of a device with these capacity requests."""
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": device_class_name,
                                "capacity": {"requests": dict(capacity)},
                            },
                        }
                    ]
                }
            }
        },
    }


def pod_with_claim_template(name: str, *, template: str, node: str | None = None) -> Json:
    """A one-container pod whose container uses a claim made from ``template``."""
    spec: Json = {
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/e2e/no-image:never-pulled",
                "resources": {"claims": [{"name": "gpu"}]},
            }
        ],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
