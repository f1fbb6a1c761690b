"""The local control plane does real DRA: kube-scheduler shares devices by consumable capacity.

A fake driver publishes shareable devices (``allowMultipleAllocations``; ``memory`` 40Gi in 1Gi
steps and ``cores`` 100, both with request policies) on the two fake nodes; pods get claims from
templates asking for shares. Everything asserted here is decided by the real kube-scheduler,
kube-controller-manager and apiserver; the kubelet stand-in only marks pods Running once their
claims are reserved for them.
"""

from __future__ import annotations

import pytest

from e2e.cluster import KubeClient
from e2e.dra_objects import quantity
from e2e.fake_driver import RESOURCE, FakeGpuDriver
from e2e.pods import (
    claim_of,
    create_pod,
    create_share_template,
    get_pod,
    is_unbound,
    only_result,
    running_pod,
    unschedulable_condition,
)
from e2e.waiting import stays, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]


def quarter_template(kube: KubeClient, namespace: str, driver: FakeGpuDriver) -> str:
    """A quarter of a device: 10Gi of 40Gi memory, 25 of 100 cores."""
    capacity = {"memory": "10Gi", "cores": "25"}
    create_share_template(
        kube, namespace, "quarter", device_class=driver.device_class, capacity=capacity
    )
    return "quarter"


def test_scheduler_packs_shares_onto_one_device_then_spreads_to_the_next_when_full(
    kube: KubeClient, namespace: str, fake_gpu_driver: FakeGpuDriver
) -> None:
    node = fake_gpu_driver.nodes[0]  # gpu-0 and gpu-1
    template = quarter_template(kube, namespace, fake_gpu_driver)
    results = []
    for index in range(5):  # one at a time: four quarters fill gpu-0, the fifth needs gpu-1
        create_pod(kube, namespace, f"share-{index}", template=template, node=node)
        pod = running_pod(kube, namespace, f"share-{index}")
        assert pod["spec"]["nodeName"] == node
        results.append(only_result(claim_of(kube, namespace, pod)))

    assert {(r["driver"], r["pool"]) for r in results} == {(fake_gpu_driver.name, node)}
    share_ids = [r.get("shareID") for r in results]
    assert all(share_ids), share_ids
    assert len(set(share_ids)) == len(results), share_ids
    for result in results:
        assert quantity(result["consumedCapacity"]["memory"]) == quantity("10Gi")
        assert quantity(result["consumedCapacity"]["cores"]) == 25
    # the allocator takes the first device in slice order that still has room
    assert [r["device"] for r in results] == ["gpu-0"] * 4 + ["gpu-1"]


def test_pod_stays_pending_while_every_device_it_may_use_is_full(
    kube: KubeClient, namespace: str, fake_gpu_driver: FakeGpuDriver
) -> None:
    node = fake_gpu_driver.nodes[1]  # one device
    template = quarter_template(kube, namespace, fake_gpu_driver)
    for index in range(4):
        create_pod(kube, namespace, f"fill-{index}", template=template, node=node)
        running_pod(kube, namespace, f"fill-{index}")

    create_pod(kube, namespace, "one-too-many", template=template, node=node)

    condition = wait_for(
        lambda: unschedulable_condition(kube, namespace, "one-too-many"),
        what="one-too-many marked Unschedulable",
    )
    assert "claim" in condition["message"].lower(), condition
    stays(lambda: is_unbound(kube, namespace, "one-too-many"), for_s=3, what="pod unbound")


def test_pod_asking_more_than_any_device_has_stays_pending_as_unschedulable(
    kube: KubeClient, namespace: str, fake_gpu_driver: FakeGpuDriver
) -> None:
    capacity = {"memory": "64Gi", "cores": "10"}
    create_share_template(
        kube, namespace, "too-big", device_class=fake_gpu_driver.device_class, capacity=capacity
    )
    create_pod(kube, namespace, "oversized", template="too-big")

    condition = wait_for(
        lambda: unschedulable_condition(kube, namespace, "oversized"),
        what="oversized marked Unschedulable",
    )
    assert condition["status"] == "False"
    assert "claim" in condition["message"].lower(), condition
    stays(lambda: is_unbound(kube, namespace, "oversized"), for_s=3, what="pod unbound")
    claim = claim_of(kube, namespace, get_pod(kube, namespace, "oversized"))
    assert not (claim.get("status") or {}).get("allocation")


def test_request_policy_rounds_consumed_memory_up_to_its_step(
    kube: KubeClient, namespace: str, fake_gpu_driver: FakeGpuDriver
) -> None:
    capacity = {"memory": "2500Mi", "cores": "7"}
    create_share_template(
        kube, namespace, "odd-size", device_class=fake_gpu_driver.device_class, capacity=capacity
    )
    create_pod(kube, namespace, "odd", template="odd-size")

    result = only_result(claim_of(kube, namespace, running_pod(kube, namespace, "odd")))

    assert quantity(result["consumedCapacity"]["memory"]) == quantity("3Gi")
    assert quantity(result["consumedCapacity"]["cores"]) == 7


def test_claims_made_from_templates_are_garbage_collected_with_their_pods(
    kube: KubeClient, namespace: str, fake_gpu_driver: FakeGpuDriver
) -> None:
    template = quarter_template(kube, namespace, fake_gpu_driver)
    for index in range(2):
        create_pod(kube, namespace, f"short-lived-{index}", template=template)
        pod = running_pod(kube, namespace, f"short-lived-{index}")
        owner = claim_of(kube, namespace, pod)["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("Pod", pod["metadata"]["uid"])

    for index in range(2):  # a graceful delete; the stand-in confirms it as a kubelet would
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/short-lived-{index}")

    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    wait_for(lambda: not kube.items(claims), what="generated claims deleted")
    assert not kube.items(f"/api/v1/namespaces/{namespace}/pods")
