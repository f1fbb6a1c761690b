"""Volcano objects the tests create (vcjobs, PodGroups, Queues) and reads of what Volcano made.

No Volcano admission webhook runs here (vc-webhook-manager only defaults and validates), so the
objects spell out what its ``jobs/mutate`` would default: scheduler name, queue, minAvailable,
task names.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from e2e.cluster.client import Json, KubeClient
from e2e.waiting import stays, wait_for

JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"
PODGROUPS = "/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups"
QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
IMAGE = "registry.invalid/e2e/no-image:never-pulled"
GANG_ANNOTATION = "scheduling.k8s.io/group-name"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"


def container(resources: Mapping[str, Any]) -> Json:
    return {"name": "main", "image": IMAGE, "resources": dict(resources)}


def task(
    name: str, replicas: int, resources: Mapping[str, Any], *, cpu: str | None = "100m"
) -> Json:
    """A task of ``replicas`` pods; each asks for ``cpu`` besides ``resources`` (see below).

    A pod whose only request is a claim has empty resource requests in Volcano's eyes: it is a
    BestEffort task, which the allocate action skips and the backfill action places one pod at a
    time, outside the gang. Real training pods ask for CPU; so do ours, unless ``cpu=None``.
    """
    resources = dict(resources)
    if cpu is not None:
        resources["requests"] = {"cpu": cpu, **(resources.get("requests") or {})}
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "metadata": {"labels": {"e2e-task": name}},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [container(resources)],
            },
        },
    }


def vcjob(name: str, tasks: list[Json], *, min_available: int, queue: str = "default") -> Json:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "volcano",
            "queue": queue,
            "minAvailable": min_available,
            "maxRetry": 1,
            "tasks": tasks,
        },
    }


def volcano_pod(name: str, limits: Mapping[str, Any], **annotations: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations)},
        "spec": {
            "schedulerName": "volcano",
            "terminationGracePeriodSeconds": 0,
            "containers": [container({"limits": dict(limits)})],
        },
    }


def podgroup(name: str, *, min_member: int, min_resources: Mapping[str, Any]) -> Json:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, "minResources": dict(min_resources), "queue": "default"},
    }


def queue(name: str, capability: Mapping[str, str]) -> Json:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1, "reclaimable": False, "capability": dict(capability)},
    }


def create_job(kube: KubeClient, ns: str, job: Json) -> Json:
    return kube.create(JOBS.format(ns=ns), job)


def job_pods(kube: KubeClient, ns: str, job: str) -> list[Json]:
    return kube.items(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"volcano.sh/job-name={job}")


def running(pods: list[Json]) -> list[Json]:
    return [p for p in pods if p["status"].get("phase") == "Running"]


def job_podgroup(kube: KubeClient, ns: str, job: str) -> Json | None:
    """The PodGroup vc-controller made for vcjob ``job`` (owned by it), once it exists."""
    for group in kube.items(PODGROUPS.format(ns=ns)):
        owners = group["metadata"].get("ownerReferences") or []
        if any(o["kind"] == "Job" and o["name"] == job for o in owners):
            return group
    return None


def claims(kube: KubeClient, ns: str) -> list[Json]:
    return kube.items(CLAIMS.format(ns=ns))


def allocated(claim: Json) -> bool:
    return bool(claim.get("status", {}).get("allocation"))


def pod_claims(kube: KubeClient, ns: str, pod: Json) -> list[Json]:
    """Every ResourceClaim generated for ``pod``."""
    names = [s["resourceClaimName"] for s in pod["status"].get("resourceClaimStatuses") or []]
    return [kube.get(f"{CLAIMS.format(ns=ns)}/{name}") for name in names]


def gang_gets_nothing(kube: KubeClient, ns: str, job: str, size: int) -> None:
    """Waits until vc-controller made the gang's `size` pods and claims and vc-scheduler tried
    and marked its PodGroup Unschedulable; then no pod may be bound and no claim allocated for a
    while (a gang that cannot fit whole gets nothing)."""

    def considered() -> bool:
        group = job_podgroup(kube, ns, job)
        if group is None or len(job_pods(kube, ns, job)) != size or len(claims(kube, ns)) != size:
            return False
        conditions = group.get("status", {}).get("conditions") or []
        return any(c["type"] == "Unschedulable" and c["status"] == "True" for c in conditions)

    wait_for(considered, timeout_s=90, what="the gang's pods, claims and Unschedulable condition")

    def nothing_allocated() -> bool:
        bound = [p for p in job_pods(kube, ns, job) if p["spec"].get("nodeName")]
        return not bound and not any(allocated(c) for c in claims(kube, ns))

    stays(nothing_allocated, for_s=8, what="no pod bound and no claim allocated")


@contextmanager
def open_queue(kube: KubeClient, capability: Mapping[str, str]) -> Iterator[str]:
    """A Queue of `capability` (a fresh name), once Volcano has opened it; deleted after."""
    name = f"q-{secrets.token_hex(3)}"
    kube.create(QUEUES, queue(name, capability))
    wait_for(
        lambda: kube.get(f"{QUEUES}/{name}").get("status", {}).get("state") == "Open",
        timeout_s=30,
        what=f"queue {name} Open",
    )
    try:
        yield name
    finally:
        kube.delete(f"{QUEUES}/{name}")
