"""The chart's nvidiaEnforced admission policies (nvidiaDriver.enabled) on the real API server:
a ResourceClaim or ResourceClaimTemplate that asks for NVIDIA's gpu.nvidia.com (exactly, or in a
firstAvailable subrequest) without an `exactly` request of our enforcer's DeviceClass is refused,
naming the field and why (NVIDIA's driver enforces no limit: no share without its limits), in
every namespace but allowedNamespaces and for every user, kube-scheduler included (its
extended-resource claims for nvidia.com/gpu pods the webhook did not translate would be cards
without limits). Claims with the enforcer, of other classes, and admin-access requests pass.
A claim or template carrying an opaque config of driver gpu.nvidia.com is refused even with the
enforcer: NVIDIA prepares shares of one card only when all their configs are equal, so it would
fail every other tenant's share on that card.

Creates are server-side dry runs: admission runs in full, nothing is stored."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.chart.policy_objects import (
    POLICY_KINDS,
    SCHEDULER,
    applied,
    claim_asking,
    dry_run_create,
    make_namespace,
    refusal,
    template_asking,
)
from e2e.chart.rendering import Helm, Json
from e2e.cluster import KubeClient
from e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

NVIDIA_CLASS = "gpu.nvidia.com"
ENFORCER = "enforcer.vgb.io"
ADMIN_ACCESS_LABEL = {"resource.kubernetes.io/admin-access": "true"}


@dataclass(frozen=True)
class Installed:
    served: str
    allowed: str
    admin: str  # labelled for admin-access claims


@pytest.fixture(scope="module")
def installed(helm: Helm, kube: KubeClient) -> Iterator[Installed]:
    """The nvidiaEnforced policies and bindings, created for real as the chart renders them with
    one allowed namespace (the bindings then cover every other one)."""
    served = make_namespace(kube, "team-nv")
    allowed = make_namespace(kube, "nv-allowed")
    admin = make_namespace(kube, "nv-admin", ADMIN_ACCESS_LABEL)
    release = f"vb-{secrets.token_hex(3)}"
    values = {
        "nvidiaDriver": {"enabled": True},
        "admissionPolicies": {"nvidiaEnforced": {"allowedNamespaces": [allowed]}},
    }
    objects = helm.template(values, release=release, namespace=f"vb-{secrets.token_hex(3)}")
    wanted = [o for o in objects
              if o["kind"] in POLICY_KINDS and "-enforced" in o["metadata"]["name"]]  # fmt: skip
    assert len(wanted) == 4, [o["metadata"]["name"] for o in wanted]
    with applied(kube, wanted):
        yield Installed(served=served, allowed=allowed, admin=admin)
    for namespace in (served, allowed, admin):
        kube.delete(f"/api/v1/namespaces/{namespace}")


def gpu_request(*, first_available: bool = False) -> Json:
    if first_available:
        subrequests = [
            {"name": "small", "deviceClassName": NVIDIA_CLASS,
             "capacity": {"requests": {"memory": "10Gi"}}},
            {"name": "other", "deviceClassName": "other.example.com"},
        ]  # fmt: skip
        return {"name": "gpu", "firstAvailable": subrequests}
    exactly = {"deviceClassName": NVIDIA_CLASS, "capacity": {"requests": {"memory": "10Gi"}}}
    return {"name": "gpu", "exactly": exactly}


ENFORCER_REQUEST = {
    "name": "vgpu-limits",
    "exactly": {"deviceClassName": ENFORCER, "allocationMode": "ExactCount", "count": 1},
}


def wait_until_refused(kube: KubeClient, installed: Installed) -> None:
    """The policies reach admission through an informer, the claims' and the templates' each
    on its own: wait until both refuse."""

    def refused() -> bool | None:
        answers = [
            dry_run_create(kube, installed.served, "resourceclaims", claim_asking(gpu_request())),
            dry_run_create(
                kube, installed.served, "resourceclaimtemplates", template_asking(gpu_request())
            ),
        ]
        return True if all(status in (403, 422) for status, _ in answers) else None

    wait_for(refused, timeout_s=30, what="the nvidiaEnforced policies to apply")


def test_a_share_of_nvidias_class_without_the_enforcer_is_refused_naming_the_request(
    kube: KubeClient, installed: Installed
) -> None:
    wait_until_refused(kube, installed)
    message = refusal(
        dry_run_create(kube, installed.served, "resourceclaims", claim_asking(gpu_request()))
    )
    expected = (
        f"spec.devices.requests[gpu]: asks for DeviceClass {NVIDIA_CLASS} without a request "
        f"of DeviceClass {ENFORCER}"
    )
    assert expected in message
    assert "enforces no memory or SM limit" in message


def test_a_first_available_alternative_of_nvidias_class_is_refused_too(
    kube: KubeClient, installed: Installed
) -> None:
    wait_until_refused(kube, installed)
    body = claim_asking(gpu_request(first_available=True))
    assert "spec.devices.requests[gpu]" in refusal(
        dry_run_create(kube, installed.served, "resourceclaims", body)
    )


def test_a_claim_template_without_the_enforcer_is_refused(
    kube: KubeClient, installed: Installed
) -> None:
    wait_until_refused(kube, installed)
    body = template_asking(gpu_request())
    message = refusal(dry_run_create(kube, installed.served, "resourceclaimtemplates", body))
    assert "spec.spec.devices.requests[gpu]: asks for DeviceClass gpu.nvidia.com" in message


def test_the_enforcer_only_as_a_first_available_alternative_does_not_count(
    kube: KubeClient, installed: Installed
) -> None:
    """An alternative may be passed over by the allocator: the enforcer must be `exactly`."""
    wait_until_refused(kube, installed)
    maybe = {"name": "vgpu-limits", "firstAvailable": [
        {"name": "other", "deviceClassName": "other.example.com"},
        {"name": "limits", "deviceClassName": ENFORCER},
    ]}  # fmt: skip
    refusal(
        dry_run_create(kube, installed.served, "resourceclaims", claim_asking(gpu_request(), maybe))
    )


def test_kube_schedulers_extended_resource_claims_are_refused(
    kube: KubeClient, installed: Installed
) -> None:
    """A pod still asking nvidia.com/gpu would get a card without limits: it stays pending."""
    wait_until_refused(kube, installed)
    body = claim_asking({"name": "container-0-request-0",
                    "exactly": {"deviceClassName": NVIDIA_CLASS, "count": 1}})  # fmt: skip
    refusal(dry_run_create(kube, installed.served, "resourceclaims", body, identity=SCHEDULER))


def test_shares_with_the_enforcer_and_claims_of_other_classes_are_admitted(
    kube: KubeClient, installed: Installed
) -> None:
    wait_until_refused(kube, installed)
    other = {"name": "gpu", "exactly": {"deviceClassName": "other.example.com"}}
    cases = [
        (installed.served, "resourceclaims", claim_asking(gpu_request(), ENFORCER_REQUEST)),
        (installed.served, "resourceclaims",
         claim_asking(gpu_request(first_available=True), ENFORCER_REQUEST)),
        (installed.served, "resourceclaimtemplates",
         template_asking(gpu_request(), ENFORCER_REQUEST)),
        (installed.served, "resourceclaims", claim_asking(other)),
        (installed.allowed, "resourceclaims", claim_asking(gpu_request())),
    ]  # fmt: skip
    for namespace, resource, body in cases:
        status, answer = dry_run_create(kube, namespace, resource, body)
        assert status == 201, (namespace, resource, answer)


def test_an_admin_access_request_books_nothing_and_is_admitted(
    kube: KubeClient, installed: Installed
) -> None:
    """Admin access (monitoring) is allowed only in namespaces labelled for it and takes no
    share; the policy leaves it to that label."""
    wait_until_refused(kube, installed)
    body = claim_asking({"name": "watch",
                    "exactly": {"deviceClassName": NVIDIA_CLASS, "adminAccess": True}})  # fmt: skip
    status, answer = dry_run_create(kube, installed.admin, "resourceclaims", body)
    assert status == 201, answer


def with_nvidia_config(body: Json) -> Json:
    """The claim or template with an opaque config of NVIDIA's driver (a TimeSlicing GpuConfig)
    beside our enforcer's request: NVIDIA prepares shares of one card only when every claim's
    config is the same, so this one would fail every other tenant's share on the card."""
    spec = body["spec"]["spec"] if body["kind"] == "ResourceClaimTemplate" else body["spec"]
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                  "sharing": {"strategy": "TimeSlicing"}}  # fmt: skip
    spec["devices"]["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": NVIDIA_CLASS, "parameters": parameters}}
    ]
    return body


@pytest.mark.parametrize(
    ("resource", "field", "make"),
    [("resourceclaims", "spec.devices.config", claim_asking),
     ("resourceclaimtemplates", "spec.spec.devices.config", template_asking)],
)  # fmt: skip
def test_an_opaque_config_of_nvidias_driver_is_refused_even_with_the_enforcer(
    kube: KubeClient, installed: Installed, resource: str, field: str, make: Any
) -> None:
    wait_until_refused(kube, installed)
    body = with_nvidia_config(make(gpu_request(), ENFORCER_REQUEST))
    message = refusal(dry_run_create(kube, installed.served, resource, body))
    assert f"{field}: an opaque config of driver {NVIDIA_CLASS}" in message
    assert "every other share" in message


def test_an_opaque_config_of_nvidias_driver_is_admitted_in_an_allowed_namespace(
    kube: KubeClient, installed: Installed
) -> None:
    wait_until_refused(kube, installed)
    body = with_nvidia_config(claim_asking(gpu_request(), ENFORCER_REQUEST))
    status, answer = dry_run_create(kube, installed.allowed, "resourceclaims", body)
    assert status == 201, answer
