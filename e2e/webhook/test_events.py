"""The webhook's Events on the real API server, found as `kubectl describe` finds them (core/v1
Events selected by the regarded object's kind, namespace, name and uid): what a translated pod's
container got, why a controller's pod was refused (on the controller, since the pod never
exists), a refusal of a named pod without owner, nothing for dry runs, and a storm of identical
refusals that stays one Event whose series counts them.

What a mutating webhook knows at a CREATE (seen on this API server): no uid and no
creationTimestamp yet, and with `generateName` no name; so Events are posted after the object is
stored (see `vgpu_bridge/webhook/event_notes.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import ApiError, Json
from e2e.waiting import wait_for
from e2e.webhook.helpers import create_pod, gpu_pod

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
DRIVER = "gpu.vgpu-bridge.io"
SHARE = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}
REFUSED = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 150}
STORM = 200


def described(
    kube: KubeClient, ns: str, kind: str, name: str, uid: str | None, *, reason: str | None = None
) -> list[Json]:
    """Ours among the Events `kubectl describe KIND NAME` lists (its field selector), of
    `reason` when given."""
    selector = [f"involvedObject.kind={kind}", f"involvedObject.name={name}",
                f"involvedObject.namespace={ns}"]  # fmt: skip
    if uid:
        selector.append(f"involvedObject.uid={uid}")
    found = kube.items(f"/api/v1/namespaces/{ns}/events", fieldSelector=",".join(selector))
    ours = [e for e in found if e.get("reportingComponent") == DRIVER]
    return [e for e in ours if reason is None or e["reason"] == reason]


def described_once(
    kube: KubeClient, ns: str, kind: str, name: str, uid: str | None, *, reason: str
) -> Json:
    def one() -> Json | None:
        found = described(kube, ns, kind, name, uid, reason=reason)
        assert len(found) <= 1, found
        return found[0] if found else None

    return wait_for(one, timeout_s=30, what=f"an Event {reason} on {kind} {name}")


def refuse(kube: KubeClient, ns: str, pod: Json, *, dry_run: bool = False) -> str:
    with pytest.raises(ApiError) as refused:
        create_pod(kube, ns, pod, dry_run=dry_run)
    assert refused.value.status in (400, 403)
    return refused.value.body


def replica_set(kube: KubeClient, ns: str, name: str) -> Json:
    """A ReplicaSet with no replicas: the owner our test pods name, as a controller's pods do."""
    template = gpu_pod("ignored", {"nvidia.com/gpumem": 1000})
    template["metadata"] = {"labels": {"app": name}}
    body = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": template}}  # fmt: skip
    return kube.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", body)


def owned_pod(owner: Json, limits: dict[str, Any]) -> Json:
    pod = gpu_pod("", limits)
    meta = owner["metadata"]
    pod["metadata"] = {
        "generateName": f"{meta['name']}-",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": meta["name"],
                             "uid": meta["uid"], "controller": True}],
    }  # fmt: skip
    return pod


def test_a_translated_pod_describes_what_its_container_got(kube: KubeClient, ns: str) -> None:
    created = create_pod(kube, ns, gpu_pod("share", SHARE))
    template = created["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    event = described_once(
        kube, ns, "Pod", "share", created["metadata"]["uid"], reason="GpuShareTranslated"
    )
    assert (event["type"], event["reason"], event["action"]) == (
        "Normal", "GpuShareTranslated", "Translate"
    )  # fmt: skip
    assert event["message"] == (
        f"container main: 1 card, 3000 MiB, 30% cores (claim template {template})"
    )
    assert event["reportingComponent"] == DRIVER


def test_a_translated_deployment_describes_what_its_pods_get(kube: KubeClient, ns: str) -> None:
    template = gpu_pod("ignored", SHARE)
    template["metadata"] = {"labels": {"app": "web"}}
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                     "template": template}}  # fmt: skip
    created = kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", body)
    event = described_once(
        kube, ns, "Deployment", "web", created["metadata"]["uid"], reason="GpuShareTranslated"
    )
    assert event["reason"] == "GpuShareTranslated"
    assert event["message"].startswith("container main: 1 card, 3000 MiB, 30% cores")


def test_a_refused_pod_of_a_controller_is_described_on_the_controller(
    kube: KubeClient, ns: str
) -> None:
    owner = replica_set(kube, ns, "trainer")
    message = refuse(kube, ns, owned_pod(owner, REFUSED))
    event = described_once(
        kube, ns, "ReplicaSet", "trainer", owner["metadata"]["uid"], reason="GpuShareRefused"
    )
    assert (event["type"], event["reason"], event["action"]) == (
        "Warning", "GpuShareRefused", "Refuse"
    )  # fmt: skip
    assert event["message"].startswith(f"Pod/{ns}/trainer-*: spec.containers[0]")
    assert "gpucores" in event["message"]
    assert event["message"] in message


def test_a_refused_pod_without_owner_is_found_by_name_and_dry_runs_post_nothing(
    kube: KubeClient, ns: str
) -> None:
    refuse(kube, ns, gpu_pod("dry", REFUSED), dry_run=True)
    create_pod(kube, ns, gpu_pod("dry-share", SHARE), dry_run=True)
    refuse(kube, ns, gpu_pod("refused", REFUSED))
    event = described_once(kube, ns, "Pod", "refused", None, reason="GpuShareRefused")
    assert event["reason"] == "GpuShareRefused"
    assert "uid" not in event["involvedObject"]  # it never existed
    # one worker posts in admission order: the dry runs before would have been posted by now
    assert described(kube, ns, "Pod", "dry", None) == []
    assert described(kube, ns, "Pod", "dry-share", None) == []


def test_a_storm_of_identical_refusals_is_one_event_counting_them(
    kube: KubeClient, ns: str
) -> None:
    owner = replica_set(kube, ns, "storm")
    for _ in range(STORM):
        refuse(kube, ns, owned_pod(owner, REFUSED))
    uid = owner["metadata"]["uid"]

    def counted_all() -> Json | None:
        found = described(kube, ns, "ReplicaSet", "storm", uid, reason="GpuShareRefused")
        assert len(found) <= 1, found
        event = found[0] if found else {}
        return event if (event.get("series") or {}).get("count") == STORM else None

    event = wait_for(counted_all, timeout_s=60, what=f"the Event's series to count {STORM}")
    assert event["reason"] == "GpuShareRefused"
    ours = [e for e in kube.items(f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
            if e.get("reportingController") == DRIVER]  # fmt: skip
    # the refusals' one Event, and the ReplicaSet's own translation
    assert sorted(e["reason"] for e in ours) == ["GpuShareRefused", "GpuShareTranslated"], ours
