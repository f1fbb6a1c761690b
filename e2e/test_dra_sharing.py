"""The local control plane does real DRA: kube-scheduler shares devices by consumable capacity.

A fake driver publishes shareable devices (``allowMultipleAllocations``, ``memory`` and ``cores``
with request policies) on the two fake nodes; pods get claims from templates asking for shares.
Everything asserted here is decided by the real kube-scheduler, kube-controller-manager and
apiserver; the kubelet stand-in only marks pods Running once their claims are reserved.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from e2e.cluster import Json, KubeClient, KubeletStandIn
from e2e.dra_objects import (
    device_class,
    pod_with_claim_template,
    quantity,
    resource_slice,
    share_template,
    shareable_gpu,
)
from e2e.waiting import stays, wait_for

pytestmark = pytest.mark.e2e

RESOURCE = "/apis/resource.k8s.io/v1"
DEVICE_MEMORY = "40Gi"


@dataclass(frozen=True)
class FakeGpuDriver:
    """Node 0 has devices gpu-0 and gpu-1, node 1 has gpu-0; each 40Gi of memory, 100 cores."""

    name: str
    device_class: str
    nodes: tuple[str, str]


@pytest.fixture
def gpu_driver(kube: KubeClient, fake_nodes: list[str]) -> Iterator[FakeGpuDriver]:
    token = secrets.token_hex(3)
    driver = FakeGpuDriver(
        f"gpu-{token}.e2e.vgpu-bridge.io", f"e2e-gpu-{token}", (fake_nodes[0], fake_nodes[1])
    )
    kube.create(f"{RESOURCE}/deviceclasses", device_class(driver.device_class, driver=driver.name))
    devices_per_node = {driver.nodes[0]: ["gpu-0", "gpu-1"], driver.nodes[1]: ["gpu-0"]}
    slices = []
    for node, names in devices_per_node.items():
        devices = [shareable_gpu(name, memory=DEVICE_MEMORY) for name in names]
        body = resource_slice(f"{node}-{token}", driver=driver.name, node=node, devices=devices)
        created = kube.create(f"{RESOURCE}/resourceslices", body)
        assert created["spec"]["devices"][0].get("allowMultipleAllocations") is True, (
            "the apiserver dropped allowMultipleAllocations: DRAConsumableCapacity is off"
        )
        slices.append(created["metadata"]["name"])
    yield driver
    for name in slices:
        kube.delete(f"{RESOURCE}/resourceslices/{name}")
    kube.delete(f"{RESOURCE}/deviceclasses/{driver.device_class}")


def create_template(
    kube: KubeClient, namespace: str, name: str, driver: FakeGpuDriver, *, memory: str, cores: str
) -> None:
    body = share_template(
        name, device_class_name=driver.device_class, capacity={"memory": memory, "cores": cores}
    )
    kube.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates", body)


def create_pod(
    kube: KubeClient, namespace: str, name: str, *, template: str, node: str | None = None
) -> None:
    kube.create(
        f"/api/v1/namespaces/{namespace}/pods",
        pod_with_claim_template(name, template=template, node=node),
    )


def get_pod(kube: KubeClient, namespace: str, name: str) -> Json:
    return kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")


def running_pod(kube: KubeClient, namespace: str, name: str) -> Json:
    """Wait until the pod is bound and the kubelet stand-in reports it Running."""
    return wait_for(
        lambda: (pod := get_pod(kube, namespace, name))["status"].get("phase") == "Running" and pod,
        what=f"pod {namespace}/{name} Running",
    )


def claim_of(kube: KubeClient, namespace: str, pod: Json) -> Json:
    statuses = pod["status"]["resourceClaimStatuses"]
    assert len(statuses) == 1
    return kube.get(
        f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{statuses[0]['resourceClaimName']}"
    )


def only_result(claim: Json) -> Json:
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 1, results
    result: Json = results[0]
    return result


def unschedulable_condition(kube: KubeClient, namespace: str, name: str) -> Json | None:
    pod = get_pod(kube, namespace, name)
    for condition in pod["status"].get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            found: Json = condition
            return found
    return None


def test_scheduler_packs_shares_onto_one_device_then_spreads_to_the_next_when_full(
    kube: KubeClient, namespace: str, gpu_driver: FakeGpuDriver, kubelet_standin: KubeletStandIn
) -> None:
    node = gpu_driver.nodes[0]
    create_template(kube, namespace, "quarter", gpu_driver, memory="10Gi", cores="25")
    results = []
    for index in range(5):  # four quarters fill gpu-0; the fifth must go to gpu-1
        create_pod(kube, namespace, f"share-{index}", template="quarter", node=node)
        pod = running_pod(kube, namespace, f"share-{index}")
        assert pod["spec"]["nodeName"] == node
        results.append(only_result(claim_of(kube, namespace, pod)))

    assert all(r["driver"] == gpu_driver.name and r["pool"] == node for r in results)
    share_ids = [r["shareID"] for r in results]
    assert all(share_ids), share_ids
    assert len(set(share_ids)) == 5, share_ids
    for result in results:
        assert quantity(result["consumedCapacity"]["memory"]) == quantity("10Gi")
        assert quantity(result["consumedCapacity"]["cores"]) == 25
    # the allocator takes the first device that still fits, in slice order
    assert [r["device"] for r in results] == ["gpu-0"] * 4 + ["gpu-1"]
    assert Counter(r["device"] for r in results) == {"gpu-0": 4, "gpu-1": 1}


def test_pod_stays_pending_while_every_device_it_may_use_is_full(
    kube: KubeClient, namespace: str, gpu_driver: FakeGpuDriver, kubelet_standin: KubeletStandIn
) -> None:
    node = gpu_driver.nodes[1]  # one device of 40Gi
    create_template(kube, namespace, "quarter", gpu_driver, memory="10Gi", cores="25")
    for index in range(4):
        create_pod(kube, namespace, f"fill-{index}", template="quarter", node=node)
        running_pod(kube, namespace, f"fill-{index}")

    create_pod(kube, namespace, "one-too-many", template="quarter", node=node)
    condition = wait_for(
        lambda: unschedulable_condition(kube, namespace, "one-too-many"),
        what="one-too-many marked Unschedulable",
    )
    assert "claim" in condition["message"].lower(), condition
    stays(
        lambda: not get_pod(kube, namespace, "one-too-many")["spec"].get("nodeName"),
        for_s=3,
        what="pod unbound",
    )


def test_pod_asking_more_than_any_device_has_stays_pending_as_unschedulable(
    kube: KubeClient, namespace: str, gpu_driver: FakeGpuDriver, kubelet_standin: KubeletStandIn
) -> None:
    create_template(kube, namespace, "too-big", gpu_driver, memory="64Gi", cores="10")
    create_pod(kube, namespace, "oversized", template="too-big")

    condition = wait_for(
        lambda: unschedulable_condition(kube, namespace, "oversized"),
        what="oversized marked Unschedulable",
    )
    assert condition["status"] == "False"
    assert "claim" in condition["message"].lower(), condition
    stays(
        lambda: not get_pod(kube, namespace, "oversized")["spec"].get("nodeName"),
        for_s=3,
        what="pod unbound",
    )
    pod = get_pod(kube, namespace, "oversized")
    claim = claim_of(kube, namespace, pod)
    assert not (claim.get("status") or {}).get("allocation")


def test_request_policy_rounds_consumed_memory_up_to_its_step(
    kube: KubeClient, namespace: str, gpu_driver: FakeGpuDriver, kubelet_standin: KubeletStandIn
) -> None:
    create_template(kube, namespace, "odd-size", gpu_driver, memory="2500Mi", cores="7")
    create_pod(kube, namespace, "odd", template="odd-size")

    result = only_result(claim_of(kube, namespace, running_pod(kube, namespace, "odd")))

    assert quantity(result["consumedCapacity"]["memory"]) == quantity("3Gi")
    assert quantity(result["consumedCapacity"]["cores"]) == 7


def test_claims_made_from_templates_are_garbage_collected_with_their_pods(
    kube: KubeClient, namespace: str, gpu_driver: FakeGpuDriver, kubelet_standin: KubeletStandIn
) -> None:
    create_template(kube, namespace, "quarter", gpu_driver, memory="10Gi", cores="25")
    claim_names = []
    for index in range(2):
        create_pod(kube, namespace, f"short-lived-{index}", template="quarter")
        pod = running_pod(kube, namespace, f"short-lived-{index}")
        claim = claim_of(kube, namespace, pod)
        owner = claim["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("Pod", pod["metadata"]["uid"])
        claim_names.append(claim["metadata"]["name"])

    for index in range(
        2
    ):  # an ordinary graceful delete; the stand-in confirms it as a kubelet would
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/short-lived-{index}")

    claims_path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    wait_for(lambda: not kube.items(claims_path), what=f"claims {claim_names} deleted")
    assert not kube.items(f"/api/v1/namespaces/{namespace}/pods")
