"""Pods for the real KAI scheduler, and what became of them: a bare pod with its own PodGroup
(what KAI's podgrouper would make), its placement once Running, KAI's reason when it waits, and
a namespace emptied with every claim released."""

from __future__ import annotations

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.kai.real_kai import KaiBuild, pod_group
from e2e.pods import claim_of, get_pod, only_result, running_pod, unschedulable_condition
from e2e.waiting import wait_for

RESOURCE = "/apis/resource.k8s.io/v1"


def submit(
    kube: KubeClient,
    ns: str,
    name: str,
    q: str,
    *,
    annotations: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    node: str | None = None,
) -> Json:
    """A bare pod for KAI with its own PodGroup (what the podgrouper would make), on `node`
    when given (a nodeSelector: KAI keeps to it)."""
    kube.create(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups", pod_group(name, q))
    container: Json = {"name": "main", "image": "registry.invalid/e2e/no-image:never"}
    if limits:
        container["resources"] = {"limits": limits}
    spec: Json = {
        "schedulerName": "kai-scheduler",
        "containers": [container],
        "terminationGracePeriodSeconds": 0,
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"kai.scheduler/queue": q},
            "annotations": {"pod-group-name": name, **(annotations or {})},
        },
        "spec": spec,
    }
    created: Json = kube.create(f"/api/v1/namespaces/{ns}/pods", pod)
    return created


def placed(kube: KubeClient, ns: str, name: str) -> tuple[str, str, Json]:
    """Once the pod runs: its node, the device it got and the allocation result."""
    pod = running_pod(kube, ns, name, timeout_s=90)
    result = only_result(claim_of(kube, ns, pod))
    return pod["spec"]["nodeName"], result["device"], result


def unschedulable_message(kube: KubeClient, ns: str, name: str, *, contains: str) -> str:
    def message() -> str | None:
        condition = unschedulable_condition(kube, ns, name)
        if condition is None:
            return None
        text = str(condition.get("message", ""))
        return text if contains in text else None

    return wait_for(message, timeout_s=60, what=f"{ns}/{name} unschedulable with {contains!r}")


def assert_pending_without_allocation(kube: KubeClient, ns: str, name: str) -> str:
    """KAI's reason for leaving the pod Pending; its claim has no allocation."""
    message = unschedulable_message(kube, ns, name, contains="")
    pod = get_pod(kube, ns, name)
    assert not pod["spec"].get("nodeName"), pod["spec"]
    assert not claim_of(kube, ns, pod)["status"].get("allocation")
    return message


def needs_shares(build: KaiBuild) -> None:
    if not build.has_consumable_capacity:
        pytest.skip(f"KAI {build.version} places none of our shares (see the first test)")


def emptied(kube: KubeClient, ns: str) -> None:
    """Delete the namespace's pods and wait until no claim of theirs holds a device, so the next
    test finds every card untouched."""
    for pod in kube.items(f"/api/v1/namespaces/{ns}/pods"):
        kube.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", grace_period_s=0)
    wait_for(
        lambda: (
            not any(
                c["status"].get("allocation")
                for c in kube.items(f"{RESOURCE}/namespaces/{ns}/resourceclaims")
            )
        ),
        timeout_s=60,
        what=f"the claims of {ns} released",
    )
