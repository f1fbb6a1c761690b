"""Opted-out whole-card pods against a quota filled with shares (issue 35, item 4), against the real
webhook process started as the chart starts it with `deviceClass.extendedResourceName:
nvidia.com/gpu`. The namespace's quota of 2 cards holds one share already; a tenant then asks
whole cards as a device-plugin pod (`nvidia.com/gpu`, labelled `vgpu-bridge.io/ignore`), or as the
class's implicit extended resource (no label, no key the translator reads): kube-scheduler would
give either whole cards of our class, so each is counted, and refused past the quota. In a second
namespace, a burst of whole-card pods was admitted and waits for kube-scheduler (no claim yet): the
webhook's watch of unbound pods counts them for the next admission."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.abuse.fake_api import fake_api
from tests.abuse.hostile import gpu_pod, review
from tests.abuse.webhook_client import Webhook, running_webhook
from vgpu_bridge.core import DEFAULT

NAMESPACE = "team-a"
BURST = "team-b"  # two 1-card pods admitted at once, neither bound yet
IMPLICIT = f"deviceclass.resource.kubernetes.io/{DEFAULT.device_class}"
OPTED_OUT = {"vgpu-bridge.io/ignore": "true"}


def serve_claims(namespace: str | None) -> Iterator[bytes]:
    """One share already booked in the namespace."""
    if namespace in (None, NAMESPACE):
        exactly = {"deviceClassName": DEFAULT.device_class, "count": 1,
                   "capacity": {"requests": {"memory": "1Gi", "cores": "10"}}}  # fmt: skip
        claim = {
            "metadata": {"name": "share", "namespace": NAMESPACE, "resourceVersion": "1"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        }
        yield json.dumps(claim).encode()


def serve_quotas(namespace: str | None) -> Iterator[bytes]:
    for each in (NAMESPACE, BURST):
        if namespace in (None, each):
            quota = {"metadata": {"name": "cards", "namespace": each},
                     "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}  # fmt: skip
            yield json.dumps(quota).encode()


def serve_unbound_pods(namespace: str | None) -> Iterator[bytes]:
    """The burst's pods as the API server stores them, and a plain pod waiting beside them."""
    if namespace in (None, BURST):
        for index in range(2):
            pod = gpu_pod({"nvidia.com/gpu": 1}, labels=OPTED_OUT)
            pod["metadata"].update(name=f"burst-{index}", namespace=BURST, uid=f"uid-{index}",
                                   resourceVersion="1")  # fmt: skip
            yield json.dumps(pod).encode()
        plain = {"metadata": {"name": "web", "namespace": BURST, "uid": "uid-web"},
                 "spec": {"containers": [{"name": "web", "image": "nginx"}]}}  # fmt: skip
        yield json.dumps(plain).encode()


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    with fake_api() as api:
        api.served.update(resourceclaims=serve_claims, resourcequotas=serve_quotas,
                          pods=serve_unbound_pods)  # fmt: skip
        flags = ("--extended-resource-name", "nvidia.com/gpu")
        with running_webhook(tmp_path_factory.mktemp("whole-cards"), api, *flags) as running:
            yield running


def answer(webhook: Webhook, resources: dict[str, Any], *, dry_run: bool = False,
           labels: dict[str, str] | None = None,
           namespace: str = NAMESPACE) -> dict[str, Any]:  # fmt: skip
    pod = gpu_pod(resources, labels=labels or {})
    body = json.dumps(review(pod, namespace=namespace, dryRun=dry_run)).encode()
    conn = webhook.connection()
    try:
        conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    assert response.status == 200, data[:300]
    answered: dict[str, Any] = json.loads(data)["response"]
    return answered


@pytest.mark.parametrize(
    ("resources", "labels"),
    [({"nvidia.com/gpu": 2}, OPTED_OUT), ({IMPLICIT: 2}, None)],
    ids=["opted-out-device-plugin-pod", "implicit-class-resource"],
)
def test_whole_cards_past_a_quota_filled_with_shares_are_refused(
    webhook: Webhook, resources: dict[str, Any], labels: dict[str, str] | None
) -> None:
    refused = answer(webhook, resources, labels=labels)
    assert refused["allowed"] is False, refused
    assert (
        "exceeded quota cards: requests.nvidia.com/gpu: requested 2, used 1, limited 2"
        in refused["status"]["message"]
    )


def test_whole_cards_within_the_quota_and_dry_runs_are_admitted(webhook: Webhook) -> None:
    assert answer(webhook, {"nvidia.com/gpu": 1}, labels=OPTED_OUT)["allowed"] is True
    assert answer(webhook, {IMPLICIT: 2}, dry_run=True)["allowed"] is True


def test_whole_cards_past_a_quota_held_by_pods_not_yet_bound_are_refused(webhook: Webhook) -> None:
    """Neither burst pod has a claim yet (kube-scheduler makes it at binding): before the watch
    of unbound pods each admission saw 0 used, so a burst took any number of cards."""
    refused = answer(webhook, {"nvidia.com/gpu": 1}, labels=OPTED_OUT, namespace=BURST)
    assert refused["allowed"] is False, refused
    assert (
        "exceeded quota cards: requests.nvidia.com/gpu: requested 1, used 2, limited 2"
        in refused["status"]["message"]
    )
