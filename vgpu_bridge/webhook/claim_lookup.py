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
    #: of NVIDIA's DeviceClass (profile nvidia) without a request of our enforcer's: a share
    #: no one would hold to its limits; or with an opaque config of NVIDIA's driver, which would
    #: fail Prepare of every other share on that card (NVIDIA wants the same config on all)
    UNENFORCED = "requests devices of our DeviceClass without our enforcer"
    OTHER = "requests no device of our DeviceClass"
    MISSING = "does not exist (yet)"
    UNNAMEABLE = "its name or namespace is no DNS name, so it is never put into an API path"


def _devices(found: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = found.get("spec", {})
    spec = spec.get("spec", spec)  # a template wraps the claim spec once more
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    return devices if isinstance(devices, Mapping) else {}


def _requests(found: Mapping[str, Any]) -> list[Any]:
    return _devices(found).get("requests") or []


def configures_driver(found: Mapping[str, Any], driver: str) -> bool:
    """Whether a claim or template carries an opaque config for `driver`."""
    for config in _devices(found).get("config") or ():
        opaque = config.get("opaque") if isinstance(config, Mapping) else None
        if isinstance(opaque, Mapping) and opaque.get("driver") == driver:
            return True
    return False


def _share_request(request: Any, device_class: str) -> bool:
    """Whether a request may be allocated a share of `device_class`: `exactly` without admin
    access (which books nothing), or any `firstAvailable` alternative."""
    exactly = request.get("exactly") or {}
    if exactly.get("deviceClassName") == device_class and not exactly.get("adminAccess"):
        return True
    return any(
        s.get("deviceClassName") == device_class for s in request.get("firstAvailable") or ()
    )


def requests_share(found: Mapping[str, Any], device_class: str) -> bool:
    """Whether a claim or template asks for a share of `device_class` (admin-access requests
    aside: the nvidiaEnforced admission policy exempts them too)."""
    return any(_share_request(r, device_class) for r in _requests(found))


def requests_class(found: Mapping[str, Any], device_class: str) -> bool:
    """Whether a claim or template requests devices of `device_class`."""
    requests = _requests(found)
    classes = {r.get("exactly", {}).get("deviceClassName") for r in requests}
    classes |= {s.get("deviceClassName") for r in requests for s in r.get("firstAvailable") or ()}
    return device_class in classes


def requests_exactly(found: Mapping[str, Any], device_class: str) -> bool:
    """Whether a claim or template has an `exactly` request of `device_class` (one a
    `firstAvailable` alternative might not be allocated)."""
    return any(
        r.get("exactly", {}).get("deviceClassName") == device_class for r in _requests(found)
    )


class ClaimLookup:
    """One admission's reads of claims and templates, each made once (not thread-safe: one
    admission runs on one thread)."""

    def __init__(
        self,
        api: KubeApi,
        device_class: str,
        *,
        enforcer_class: str | None = None,
        enforced_driver: str | None = None,
    ) -> None:
        """`enforcer_class`: the DeviceClass every share of `device_class` must also ask for
        (our enforcer's, profile nvidia); a claim without it is `Claimed.UNENFORCED`.
        `enforced_driver`: the driver whose opaque configs no claim may carry (NVIDIA's: one
        claim's config on a card fails Prepare of every other share of it); such a claim is
        `Claimed.UNENFORCED` too."""
        self._api = api
        self._device_class = device_class
        self._enforcer_class = enforcer_class
        self._enforced_driver = enforced_driver
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
            elif self._enforced_driver and configures_driver(found, self._enforced_driver):
                self._seen[key] = Claimed.UNENFORCED
            elif requests_class(found, self._device_class):
                self._seen[key] = self._enforced(found)
            else:
                self._seen[key] = Claimed.OTHER
        return self._seen[key]

    def _enforced(self, found: Mapping[str, Any]) -> Claimed:
        enforcer = self._enforcer_class
        if enforcer is None or not requests_share(found, self._device_class):
            return Claimed.OURS  # admin access only: books no share (as the admission policy)
        if requests_exactly(found, enforcer):
            return Claimed.OURS
        return Claimed.UNENFORCED

    def _read(self, path: str) -> Json | None:
        try:
            return self._api.get(path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
