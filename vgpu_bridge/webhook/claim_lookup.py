"""What the claims and claim templates a pod names are, read at most once per admission.

An admission may ask about one claim several times (core's guardrails for a claimed pod, the
check that a container names one claim of our class, the check that a translated pod does not
claim our devices already). Each question goes through one `ClaimLookup`, made per admission,
which reads each claim or template once and says what it is.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from vgpu_bridge.kube import (
    Json,
    KubeApi,
    KubeError,
    api_path,
    dns_label_problem,
    dns_subdomain_problem,
)

RESOURCE_API = "/apis/resource.k8s.io/v1"
#: a pod's claim entry's key -> the API resource it names
CLAIM_RESOURCES = {
    "resourceClaimTemplateName": "resourceclaimtemplates",
    "resourceClaimName": "resourceclaims",
}


class Claimed(enum.Enum):
    """What a claim or template a pod names is."""

    OURS = "requests devices of our DeviceClass"
    OTHER = "requests no device of our DeviceClass"
    MISSING = "does not exist (yet)"
    UNNAMEABLE = "its name or namespace is no DNS name, so it is never put into an API path"


def requests_class(found: Mapping[str, Any], device_class: str) -> bool:
    """Whether a claim or template requests devices of `device_class`."""
    spec = found.get("spec", {})
    spec = spec.get("spec", spec)  # a template wraps the claim spec once more
    requests = spec.get("devices", {}).get("requests") or []
    classes = {r.get("exactly", {}).get("deviceClassName") for r in requests}
    classes |= {s.get("deviceClassName") for r in requests for s in r.get("firstAvailable") or ()}
    return device_class in classes


class ClaimLookup:
    """One admission's reads of claims and templates, each made once (not thread-safe: one
    admission runs on one thread)."""

    def __init__(self, api: KubeApi, device_class: str) -> None:
        self._api = api
        self._device_class = device_class
        self._seen: dict[tuple[str, str, str], Claimed] = {}

    def claimed(self, resource: str, namespace: object, name: object) -> Claimed:
        """What `name` (a `resource`: resourceclaims or resourceclaimtemplates) in `namespace`
        is. Raises `KubeError` when the API answers anything but the object or 404."""
        if not isinstance(namespace, str) or dns_label_problem(namespace):
            return Claimed.UNNAMEABLE
        if not isinstance(name, str) or dns_subdomain_problem(name):
            return Claimed.UNNAMEABLE
        key = (resource, namespace, name)
        if key not in self._seen:
            found = self._read(api_path(RESOURCE_API, "namespaces", namespace, resource, name))
            if found is None:
                self._seen[key] = Claimed.MISSING
            elif requests_class(found, self._device_class):
                self._seen[key] = Claimed.OURS
            else:
                self._seen[key] = Claimed.OTHER
        return self._seen[key]

    def _read(self, path: str) -> Json | None:
        try:
            return self._api.get(path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
