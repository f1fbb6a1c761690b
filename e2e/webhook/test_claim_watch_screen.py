"""The claim watch's screen against the real API server's bytes (issue 35): the webhook passes over
other drivers' claim events undecoded by reading the head of each event line as the API server
writes it (`claim_bookings._EVENT_HEAD`). Here a real kube-apiserver streams the events of a claim
of another driver's class and of one of ours: the foreign ADDED and DELETED are screened to their
exact resourceVersion, ours is decoded, and nothing the API server sends is misread."""

from __future__ import annotations

import pytest

from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.client import Json
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.webhook.claim_bookings import ALL_CLAIMS, ClaimBookings

pytestmark = pytest.mark.e2e
FOREIGN_CLASS = "gpu.other-driver.example.com"


def claim(name: str, device_class: str) -> Json:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": 1}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "annotations": {"note": '"resourceVersion":"1"'}},
            "spec": {"devices": {"requests": [request]}}}  # fmt: skip


@pytest.fixture
def api(e2e_cluster: LocalCluster) -> KubeApi:
    return KubeApi.connect(str(e2e_cluster.kubeconfig))


def test_the_api_servers_foreign_claim_events_are_screened_to_their_version(
    kube: KubeClient, namespace: str, api: KubeApi
) -> None:
    bookings = ClaimBookings(api, profile=DEFAULT)
    bookings.replace([])
    path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    since = kube.get(path)["metadata"]["resourceVersion"]
    kube.create(path, claim("theirs", FOREIGN_CLASS))
    kube.create(path, claim("ours", DEFAULT.device_class))
    kube.delete(f"{path}/theirs")

    screened: list[tuple[bytes, Json | None]] = []

    def record(line: bytes) -> None:  # every line is decoded too, to compare
        screened.append((line, bookings.screen(line)))

    events = api.watch(ALL_CLAIMS, resource_version=since, timeout_s=3, screen=record,
                       fieldSelector=f"metadata.namespace={namespace}")  # fmt: skip
    seen = [(e["type"], e["object"]["metadata"]) for e in events]

    assert [(kind, meta["name"]) for kind, meta in seen] == [
        ("ADDED", "theirs"), ("ADDED", "ours"), ("DELETED", "theirs"),
    ]  # fmt: skip
    outcomes = [verdict for _, verdict in screened]
    assert outcomes[1] is None  # ours: decoded
    for index in (0, 2):
        kept = {"metadata": {"resourceVersion": seen[index][1]["resourceVersion"]}}
        assert outcomes[index] == {"type": "SKIPPED", "object": kept}
