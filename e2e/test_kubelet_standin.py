"""The fake nodes and the kubelet stand-in: the hook the node-agent tests plug their gRPC into."""

from __future__ import annotations

import threading

import pytest

from e2e.cluster import BoundPod, KubeClient, KubeletStandIn
from e2e.cluster.nodes import FAKE_NODE_LABEL
from e2e.fake_driver import FakeGpuDriver
from e2e.pods import claim_of, create_pod, create_share_template, get_pod, running_pod
from e2e.waiting import stays, wait_for

pytestmark = pytest.mark.e2e


class RecordingPreparer:
    """Records calls; fails ``prepare`` while ``fail`` is set."""

    def __init__(self) -> None:
        self.prepared: list[BoundPod] = []
        self.unprepared: list[BoundPod] = []
        self.fail = threading.Event()

    def prepare(self, pod: BoundPod) -> None:
        if self.fail.is_set():
            raise RuntimeError("node agent unavailable")
        self.prepared.append(pod)

    def unprepare(self, pod: BoundPod) -> None:
        self.unprepared.append(pod)


def half_template(kube: KubeClient, namespace: str, driver: FakeGpuDriver) -> str:
    capacity = {"memory": "20Gi", "cores": "50"}
    create_share_template(
        kube, namespace, "half", device_class=driver.device_class, capacity=capacity
    )
    return "half"


def test_fake_nodes_are_ready_untainted_schedulable_and_gpu_free(
    kube: KubeClient, fake_nodes: list[str]
) -> None:
    for name in fake_nodes:
        node = kube.get(f"/api/v1/nodes/{name}")
        assert node["metadata"]["labels"][FAKE_NODE_LABEL] == "true"
        assert not node["spec"].get("taints")
        assert not node["spec"].get("unschedulable")
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert [c["status"] for c in ready] == ["True"]
        assert not [r for r in node["status"]["capacity"] if "gpu" in r]
        assert int(node["status"]["allocatable"]["pods"]) > 0


def test_standin_hands_the_reserved_claims_to_the_preparer_then_marks_the_pod_running(
    kube: KubeClient,
    namespace: str,
    fake_gpu_driver: FakeGpuDriver,
    kubelet_standin: KubeletStandIn,
) -> None:
    preparer = RecordingPreparer()
    kubelet_standin.preparer = preparer
    create_pod(kube, namespace, "worker", template=half_template(kube, namespace, fake_gpu_driver))

    pod = running_pod(kube, namespace, "worker")

    claim = claim_of(kube, namespace, pod)
    [bound] = [p for p in preparer.prepared if p.uid == pod["metadata"]["uid"]]
    assert (bound.namespace, bound.name, bound.node_name) == (
        namespace,
        "worker",
        pod["spec"]["nodeName"],
    )
    [ref] = bound.claims
    assert (ref.name, ref.uid, ref.pod_claim_name) == (
        claim["metadata"]["name"],
        claim["metadata"]["uid"],
        "gpu",
    )
    assert ref.claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
    assert pod["metadata"]["uid"] in {r["uid"] for r in ref.claim["status"]["reservedFor"]}
    assert [c["ready"] for c in pod["status"]["containerStatuses"]] == [True]

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/worker")

    wait_for(lambda: bound.uid in [p.uid for p in preparer.unprepared], what="unprepare called")
    wait_for(
        lambda: not kube.items(f"/api/v1/namespaces/{namespace}/pods"), what="pod deletion finished"
    )


def test_pod_stays_pending_while_the_preparer_fails_and_runs_once_it_succeeds(
    kube: KubeClient,
    namespace: str,
    fake_gpu_driver: FakeGpuDriver,
    kubelet_standin: KubeletStandIn,
) -> None:
    preparer = RecordingPreparer()
    preparer.fail.set()
    kubelet_standin.preparer = preparer
    create_pod(kube, namespace, "waiting", template=half_template(kube, namespace, fake_gpu_driver))

    wait_for(lambda: get_pod(kube, namespace, "waiting")["spec"].get("nodeName"), what="bound")
    uid = get_pod(kube, namespace, "waiting")["metadata"]["uid"]
    wait_for(lambda: uid in kubelet_standin.failures, what="a recorded prepare failure")
    assert "node agent unavailable" in kubelet_standin.failures[uid]
    stays(
        lambda: get_pod(kube, namespace, "waiting")["status"].get("phase") == "Pending",
        for_s=2,
        what="Pending",
    )

    preparer.fail.clear()

    running_pod(kube, namespace, "waiting")
    assert uid not in kubelet_standin.failures


def test_a_force_deleted_pod_is_still_unprepared(
    kube: KubeClient,
    namespace: str,
    fake_gpu_driver: FakeGpuDriver,
    kubelet_standin: KubeletStandIn,
) -> None:
    preparer = RecordingPreparer()
    kubelet_standin.preparer = preparer
    create_pod(kube, namespace, "forced", template=half_template(kube, namespace, fake_gpu_driver))
    uid = running_pod(kube, namespace, "forced")["metadata"]["uid"]

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/forced", grace_period_s=0)

    wait_for(lambda: uid in [p.uid for p in preparer.unprepared], what="unprepare called")
    assert [p.uid for p in preparer.unprepared].count(uid) == 1


def test_a_pod_is_unprepared_by_the_preparer_that_prepared_it(
    kube: KubeClient,
    namespace: str,
    fake_gpu_driver: FakeGpuDriver,
    kubelet_standin: KubeletStandIn,
) -> None:
    first, second = RecordingPreparer(), RecordingPreparer()
    kubelet_standin.preparer = first
    create_pod(kube, namespace, "owned", template=half_template(kube, namespace, fake_gpu_driver))
    uid = running_pod(kube, namespace, "owned")["metadata"]["uid"]
    kubelet_standin.preparer = second

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/owned")

    wait_for(lambda: uid in [p.uid for p in first.unprepared], what="unprepare by the first")
    assert uid not in [p.uid for p in second.unprepared]
