"""Volcano's real vc-scheduler and vc-controller-manager with our webhook: gangs of GPU shares.

vc-controller-manager turns the translated vcjobs into PodGroups and pods; vc-scheduler enqueues
the gangs, allocates the claims (upstream DRA code inside it, consumable capacity on) and binds
the pods; the kubelet stand-in marks bound pods Running once their claims are reserved for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.dra_objects import quantity
from e2e.pods import running_pod
from e2e.volcano.components import Volcano
from e2e.volcano.objects import (
    GANG_ANNOTATION,
    PODGROUPS,
    QUEUES,
    allocated,
    claims,
    create_job,
    gang_gets_nothing,
    job_podgroup,
    job_pods,
    open_queue,
    pod_claims,
    podgroup,
    running,
    task,
    vcjob,
    volcano_pod,
)
from e2e.waiting import stays, wait_for
from e2e.webhook.helpers import create_pod

pytestmark = pytest.mark.e2e
DRIVER = "gpu.vgpu-bridge.io"
CLASS = "gpu.vgpu-bridge.io"


def all_running(
    kube: KubeClient, ns: str, job: str, count: int, timeout_s: float = 90
) -> list[Json]:
    def probe() -> list[Json] | None:
        pods = running(job_pods(kube, ns, job))
        return pods if len(pods) == count else None

    return wait_for(probe, timeout_s=timeout_s, what=f"{count} pods of vcjob {job} Running")


def share(kube: KubeClient, ns: str, pod: Json) -> Json:
    """The one allocation result of the pod's one claim, checked to be a share of our driver."""
    [claim] = pod_claims(kube, ns, pod)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    reserved = [r["name"] for r in claim["status"].get("reservedFor") or []]
    assert reserved == [pod["metadata"]["name"]]
    assert result["driver"] == DRIVER
    assert result["shareID"], result
    assert result["pool"] == pod["spec"]["nodeName"]
    return dict(result)


def test_vcjob_of_two_tasks_is_gang_scheduled_onto_shared_devices(
    kube: KubeClient, vns: str
) -> None:
    """(a) 4 pods of 2 tasks, 30000Mi each, on 3 cards: two must share one card."""
    job = vcjob(
        "train",
        [
            task("worker", 2, {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000}}),
            task(
                "ps", 2, {"limits": {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 30000}}
            ),
        ],
        min_available=4,
    )
    created = create_job(kube, vns, job)
    for t in created["spec"]["tasks"]:
        spec = t["template"]["spec"]
        assert spec["resourceClaims"], t
        assert "limits" not in spec["containers"][0]["resources"], t

    pods = all_running(kube, vns, "train", 4)
    results = [share(kube, vns, pod) for pod in pods]
    for result in results:
        assert quantity(result["consumedCapacity"]["memory"]) == quantity("30000Mi")
    cards = Counter((r["pool"], r["device"]) for r in results)
    assert max(cards.values()) == 2, cards  # shared: two shares on one card
    assert len({r["shareID"] for r in results}) == 4
    group = job_podgroup(kube, vns, "train")
    assert group is not None
    assert group["spec"]["minMember"] == 4
    assert not any("gpu" in key for key in group["spec"].get("minResources") or {})


def test_vcjob_with_gpu_in_template_requests_enqueues_and_runs(kube: KubeClient, vns: str) -> None:
    """(b) `nvidia.com/gpu` in the template's *requests* would reach the PodGroup's minResources,
    which no node advertises: translated at the Job, the gang enqueues and runs."""
    gpu = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}
    resources = {"requests": {"cpu": "100m", **gpu}, "limits": dict(gpu)}
    create_job(kube, vns, vcjob("req", [task("main", 2, resources)], min_available=2))
    pods = all_running(kube, vns, "req", 2)
    for pod in pods:
        result = share(kube, vns, pod)
        assert quantity(result["consumedCapacity"]["memory"]) == quantity("4000Mi")
    group = job_podgroup(kube, vns, "req")
    assert group is not None
    min_resources = group["spec"].get("minResources") or {}
    assert quantity(min_resources["cpu"]) == quantity("200m")
    assert not [key for key in min_resources if "nvidia.com" in key], min_resources


def test_without_translation_gpu_in_template_requests_deadlocks(
    kube: KubeClient, namespace: str, volcano: Volcano
) -> None:
    """The control for the test above: in a namespace our webhook does not translate, the same
    vcjob's PodGroup asks for `nvidia.com/gpu`, which no node advertises; enqueue never admits
    it and vc-controller creates no pod (HAMi-DRA's pod-only translation hits this)."""
    gpu = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000}
    resources = {"requests": dict(gpu), "limits": dict(gpu)}
    create_job(kube, namespace, vcjob("req", [task("main", 2, resources)], min_available=2))
    group = wait_for(
        lambda: job_podgroup(kube, namespace, "req"), timeout_s=30, what="the job's PodGroup"
    )
    assert quantity(group["spec"]["minResources"]["nvidia.com/gpu"]) == 2

    def stuck() -> bool:
        group = job_podgroup(kube, namespace, "req") or {}
        phase = group.get("status", {}).get("phase")
        return phase == "Pending" and not job_pods(kube, namespace, "req")

    wait_for(stuck, timeout_s=30, what="vc-scheduler to set the PodGroup's phase Pending")
    stays(stuck, for_s=8, what="the PodGroup Pending with no pods")


def test_gang_that_cannot_fit_stays_pending_with_nothing_allocated(
    kube: KubeClient, vns: str
) -> None:
    """(c) 6 shares of 30000Mi: the cards hold 5 (2 + 2 + 1), so the gang of 6 gets nothing."""
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000}
    create_job(kube, vns, vcjob("big", [task("w", 6, {"limits": limits})], min_available=6))
    gang_gets_nothing(kube, vns, "big", 6)
    group = job_podgroup(kube, vns, "big")
    assert group is not None
    assert group["status"].get("phase") != "Running"


def test_gang_of_gpu_only_tasks_is_backfilled_outside_the_gang(kube: KubeClient, vns: str) -> None:
    """The caveat docs/volcano.md states: without a CPU request a translated task is BestEffort to
    Volcano, and the backfill action binds such pods one at a time, ignoring minAvailable: of the
    same six 30000Mi shares, the five that fit are bound."""
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000}
    job = vcjob("loose", [task("w", 6, {"limits": limits}, cpu=None)], min_available=6)
    create_job(kube, vns, job)
    pods = all_running(kube, vns, "loose", 5)
    assert len(job_pods(kube, vns, "loose")) == 6
    assert len([c for c in claims(kube, vns) if allocated(c)]) == 5
    for pod in pods:
        assert quantity(share(kube, vns, pod)["consumedCapacity"]["memory"]) == quantity("30000Mi")


def test_plain_pod_with_volcano_scheduler_name(kube: KubeClient, vns: str) -> None:
    """(d) pg-controller makes the PodGroup of a plain pod; vc-scheduler allocates its share."""
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 5000, "nvidia.com/gpucores": 25}
    created = create_pod(kube, vns, volcano_pod("solo", limits))
    assert created["spec"]["resourceClaims"]
    pod = running_pod(kube, vns, "solo", timeout_s=90)
    result = share(kube, vns, pod)
    assert quantity(result["consumedCapacity"]["memory"]) == quantity("5000Mi")
    assert quantity(result["consumedCapacity"]["cores"]) == 25
    group_name = pod["metadata"]["annotations"][GANG_ANNOTATION]
    group = kube.get(f"{PODGROUPS.format(ns=vns)}/{group_name}")
    assert not [k for k in group["spec"].get("minResources") or {} if "nvidia.com" in k]


@pytest.fixture
def quota_queue(kube: KubeClient) -> Iterator[str]:
    """A queue that may hold 40Gi of our shares' memory, 2 shares and 200 percent of cores.

    Every dimension our claims request (memory, cores and the milliCores booking) must be named:
    Volcano's capacity plugin refuses a request for a dimension missing from the queue's
    capability of the class.
    """
    capability = {
        f"memory.deviceclass/{CLASS}": "40Gi",
        f"cores.deviceclass/{CLASS}": "200",
        f"milliCores.deviceclass/{CLASS}": "200k",
        f"deviceclass/{CLASS}": "2",
    }
    with open_queue(kube, capability) as name:
        yield name


def queued_job(kube: KubeClient, ns: str, name: str, queue_name: str, memory_mi: int) -> None:
    job = vcjob(name, [task("w", 1, {"limits": {"nvidia.com/gpumem": memory_mi}})], min_available=1)
    job["spec"]["queue"] = queue_name
    create_job(kube, ns, job)


def waits_for_quota(kube: KubeClient, ns: str, job: str) -> None:
    """The job is admitted (its PodGroup and pod exist) but its pod stays unbound."""
    wait_for(lambda: job_pods(kube, ns, job), timeout_s=30, what=f"the pod of {job}")

    def unbound() -> bool:
        return all(not p["spec"].get("nodeName") for p in job_pods(kube, ns, job))

    stays(unbound, for_s=8, what=f"{job} waiting for quota")


def test_queue_capacity_on_our_device_class_holds(
    kube: KubeClient, vns: str, quota_queue: str
) -> None:
    """(e) The queue may hold 40Gi and 2 shares of our class (the cards have 200Gi and room for
    many more): 30Gi runs, 20Gi more waits until the first job is gone; then a second share of
    5Gi runs, and a third of 5Gi waits on the share count though memory would allow it."""
    queued_job(kube, vns, "first", quota_queue, 30720)
    all_running(kube, vns, "first", 1)
    queued_job(kube, vns, "second", quota_queue, 20480)
    waits_for_quota(kube, vns, "second")
    status = kube.get(f"{QUEUES}/{quota_queue}")["status"]
    assert quantity(status["allocated"][f"memory.deviceclass/{CLASS}"]) == quantity("30Gi")
    assert quantity(status["allocated"][f"deviceclass/{CLASS}"]) == 1

    kube.delete(f"/apis/batch.volcano.sh/v1alpha1/namespaces/{vns}/jobs/first")
    [pod] = all_running(kube, vns, "second", 1, timeout_s=120)
    assert quantity(share(kube, vns, pod)["consumedCapacity"]["memory"]) == quantity("20Gi")

    queued_job(kube, vns, "third", quota_queue, 5120)
    all_running(kube, vns, "third", 1)
    queued_job(kube, vns, "fourth", quota_queue, 5120)
    waits_for_quota(kube, vns, "fourth")


def test_user_podgroup_with_gpu_in_min_resources_is_stripped_and_the_gang_runs(
    kube: KubeClient, vns: str
) -> None:
    """(f) A PodGroup someone else made keeps `nvidia.com/gpu` out of minResources."""
    group = podgroup("team", min_member=2, min_resources={"cpu": "200m", "nvidia.com/gpu": 2})
    created = kube.create(PODGROUPS.format(ns=vns), group)
    assert "nvidia.com/gpu" not in created["spec"]["minResources"]
    assert quantity(created["spec"]["minResources"]["cpu"]) == quantity("200m")
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000}
    for index in range(2):
        pod = volcano_pod(f"member-{index}", limits, **{GANG_ANNOTATION: "team"})
        pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "100m"}
        create_pod(kube, vns, pod)
    for index in range(2):
        pod = running_pod(kube, vns, f"member-{index}", timeout_s=90)
        assert quantity(share(kube, vns, pod)["consumedCapacity"]["memory"]) == quantity("2000Mi")
