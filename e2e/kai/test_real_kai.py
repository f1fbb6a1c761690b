"""Pods placed by the real KAI scheduler and bound by the real KAI binder: the build that
``python -m e2e.kai build --source DIR`` made last, or ``KAI_BIN_DIR``, ``KAI_CRD_DIR`` and
``KAI_VERSION`` (e2e/kai/real_kai.py). ``make e2e-kai`` runs them and fails without a build;
elsewhere they skip: the module proxy these machines reach does not serve KAI's module.

What a build with PR #2102 (consumable capacity) does, and what a build without it does
instead (nothing placed; whole devices for a class without the shareable-only selector).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.dra_objects import pod_with_claim_template, quantity, share_template
from e2e.kai.conftest import HALF_GPU, ONE_GPU, UNLIMITED
from e2e.kai.kai_pods import (
    assert_pending_without_allocation,
    needs_shares,
    placed,
    submit,
    unschedulable_message,
)
from e2e.kai.real_kai import KaiBuild, pod_group
from e2e.pods import claim_of, get_pod, only_result, running_pod
from vgpu_bridge.core import DEFAULT

pytestmark = [pytest.mark.e2e, pytest.mark.needs_kai_build]
RESOURCE = "/apis/resource.k8s.io/v1"


def results_of(kube: KubeClient, ns: str, names: list[str]) -> list[Json]:
    return [only_result(claim_of(kube, ns, running_pod(kube, ns, n, timeout_s=90))) for n in names]


def test_two_gpu_memory_pods_share_one_device(
    kube: KubeClient, kai_ns: str, real_kai: KaiBuild, fake_nodes: list[str]
) -> None:
    """One after the other on a two-card node: the second share joins the first's card (the
    allocator takes the first device with room), as shares (`shareID`, `consumedCapacity`)."""
    names = ["mem-a", "mem-b"]
    if not real_kai.has_consumable_capacity:
        # KAI <= v0.17.0 allocates with no DRA features: its CEL view of a device lacks
        # allowMultipleAllocations, so our DeviceClass (shareable devices only) matches nothing.
        for name in names:
            submit(kube, kai_ns, name, UNLIMITED, annotations={"gpu-memory": "10240"})
        for name in names:
            message = unschedulable_message(kube, kai_ns, name, contains="cannot allocate all DRA")
            assert message.count("cannot allocate all DRA claims on node") == 2, message
            assert not claim_of(kube, kai_ns, get_pod(kube, kai_ns, name))["status"].get(
                "allocation"
            )
        return
    results = []
    for name in names:
        submit(kube, kai_ns, name, UNLIMITED, annotations={"gpu-memory": "10240"},
               node=fake_nodes[0])  # fmt: skip
        results.append(placed(kube, kai_ns, name))
    assert results[0][:2] == results[1][:2], results
    for _, _, result in results:
        assert result["shareID"]
        assert quantity(result["consumedCapacity"]["memory"]) == quantity("10Gi")


def test_gpu_fractions_pair_up_on_one_card(
    kube: KubeClient, kai_ns: str, real_kai: KaiBuild, fake_nodes: list[str]
) -> None:
    """Two `gpu-fraction: 0.5` pods (one card size) end on one card, 40Gi each."""
    needs_shares(real_kai)
    results = []
    for name in ("frac-a", "frac-b"):
        submit(kube, kai_ns, name, UNLIMITED, annotations={"gpu-fraction": "0.5"},
               node=fake_nodes[0])  # fmt: skip
        results.append(placed(kube, kai_ns, name))
    assert results[0][:2] == results[1][:2], results
    for _, _, result in results:
        assert result["shareID"]
        assert quantity(result["consumedCapacity"]["memory"]) == quantity("40Gi")


def test_a_node_takes_new_shares_only_while_it_has_an_untouched_card(
    kube: KubeClient, kai_ns: str, real_kai: KaiBuild, fake_nodes: list[str]
) -> None:
    """KAI counts a claim of a class named *gpu* as one whole GPU and wants an idle GPU on the
    node before it asks the DRA allocator: on a node of two 80Gi cards, two 30,000 MiB shares
    share card A and a third takes card B; the fourth (10,000 MiB) stays Pending although card A
    still has 21,920 MiB free and card B 51,920 MiB."""
    needs_shares(real_kai)
    node = fake_nodes[0]
    devices = []
    for name in ("big-a", "big-b", "big-c"):
        submit(kube, kai_ns, name, UNLIMITED, annotations={"gpu-memory": "30000"}, node=node)
        devices.append(placed(kube, kai_ns, name)[1])
    assert devices[0] == devices[1] != devices[2], devices
    submit(kube, kai_ns, "small-d", UNLIMITED, annotations={"gpu-memory": "10000"}, node=node)
    message = assert_pending_without_allocation(kube, kai_ns, "small-d")
    # KAI names only the node the selector rules out; node 0's reason is its GPU count
    assert "no nodes with enough resources were found" in message, message


def test_a_one_card_node_takes_one_share(
    kube: KubeClient, kai_ns: str, real_kai: KaiBuild, fake_nodes: list[str]
) -> None:
    """The same limit on a one-card node: a 1 GiB share runs, a second one waits; once the first
    is gone the card is untouched again and the second runs."""
    needs_shares(real_kai)
    node = fake_nodes[1]
    submit(kube, kai_ns, "one-a", UNLIMITED, annotations={"gpu-memory": "1024"}, node=node)
    placed(kube, kai_ns, "one-a")
    submit(kube, kai_ns, "one-b", UNLIMITED, annotations={"gpu-memory": "1024"}, node=node)
    assert_pending_without_allocation(kube, kai_ns, "one-b")
    kube.delete(f"/api/v1/namespaces/{kai_ns}/pods/one-a", grace_period_s=0)
    placed(kube, kai_ns, "one-b")


def test_a_whole_gpu_pod_stays_off_a_shared_card(
    kube: KubeClient, kai_ns: str, real_kai: KaiBuild, fake_nodes: list[str]
) -> None:
    """`nvidia.com/gpu: 1` without a memory request is the whole card: next to a share on a
    two-card node it gets the other card, all of its memory."""
    needs_shares(real_kai)
    node = fake_nodes[0]
    submit(kube, kai_ns, "share", UNLIMITED, annotations={"gpu-memory": "10240"}, node=node)
    share_device = placed(kube, kai_ns, "share")[1]
    submit(kube, kai_ns, "whole", UNLIMITED, limits={"nvidia.com/gpu": "1"}, node=node)
    _, whole_device, result = placed(kube, kai_ns, "whole")
    assert whole_device != share_device
    assert quantity(result["consumedCapacity"]["memory"]) == quantity("80Gi"), result


@pytest.mark.parametrize(
    ("annotations", "gpus"),
    [
        ({"gpu-memory": "1024"}, 1),  # 1/80 of a card
        ({"gpu-fraction": "0.1", "gpu-fraction-num-devices": "2"}, 2),
    ],
)
def test_each_share_counts_as_one_whole_gpu_of_the_queue(
    kube: KubeClient, kai_ns: str, annotations: dict[str, str], gpus: int
) -> None:
    """KAI's quota check, before any allocation: a queue limited to half a GPU refuses even
    the smallest share, because KAI counts each device of a claim of a "gpu" class as one."""
    submit(kube, kai_ns, "small", HALF_GPU, annotations=annotations)
    message = unschedulable_message(kube, kai_ns, "small", contains="OverLimit")
    assert "Limit is 0.5 GPUs" in message, message
    assert f"workload requested {gpus} GPUs" in message, message


def test_one_gpu_queue_runs_one_share_at_a_time(
    kube: KubeClient, kai_ns: str, real_kai: KaiBuild
) -> None:
    """A queue with `gpu.limit: 1` runs one 1 GiB share at a time, though a card holds 80."""
    if not real_kai.has_consumable_capacity:
        pytest.skip(f"KAI {real_kai.version} places none of our shares (see the tests above)")
    submit(kube, kai_ns, "small-a", ONE_GPU, annotations={"gpu-memory": "1024"})
    running_pod(kube, kai_ns, "small-a", timeout_s=90)
    submit(kube, kai_ns, "small-b", ONE_GPU, annotations={"gpu-memory": "1024"})
    message = unschedulable_message(kube, kai_ns, "small-b", contains="OverLimit")
    assert "currently 1 GPUs allocated" in message, message
    kube.delete(f"/api/v1/namespaces/{kai_ns}/pods/small-a", grace_period_s=0)
    running_pod(kube, kai_ns, "small-b", timeout_s=90)


@pytest.fixture
def plain_class(kube: KubeClient, kai_ns: str) -> Iterator[str]:
    """A class of our driver's devices without our class's `allowMultipleAllocations` selector
    (as other drivers' classes are), and a template asking it for a 1Gi share."""
    name = "gpu-plain.e2e.vgpu-bridge.io"
    expression = f'device.driver == "{DEFAULT.driver}"'
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }
    kube.create(f"{RESOURCE}/deviceclasses", body)
    template = share_template("plain", device_class_name=name, capacity={"memory": "1Gi"})
    kube.create(f"{RESOURCE}/namespaces/{kai_ns}/resourceclaimtemplates", template)
    yield "plain"
    kube.delete(f"{RESOURCE}/deviceclasses/{name}")


def test_capacity_requests_of_another_class_without_consumable_capacity(
    kube: KubeClient, kai_ns: str, real_kai: KaiBuild, plain_class: str
) -> None:
    """The version gate's premise for classes that do not insist on shareable devices: KAI
    without #2102 places them, binds them and its binder writes the allocation, but each gets a
    whole device (no shareID, capacity ignored); with #2102 they are shares."""
    names = ["plain-a", "plain-b"]
    for name in names:
        kube.create(
            f"/apis/scheduling.run.ai/v2alpha2/namespaces/{kai_ns}/podgroups",
            pod_group(name, UNLIMITED),
        )
        body = pod_with_claim_template(name, template=plain_class)
        body["metadata"]["labels"] = {"kai.scheduler/queue": UNLIMITED}
        body["metadata"]["annotations"] = {"pod-group-name": name}
        body["spec"]["schedulerName"] = "kai-scheduler"
        body["spec"]["terminationGracePeriodSeconds"] = 0
        kube.create(f"/api/v1/namespaces/{kai_ns}/pods", body)
    results = results_of(kube, kai_ns, names)
    if real_kai.has_consumable_capacity:
        for result in results:
            assert result["shareID"]
            assert quantity(result["consumedCapacity"]["memory"]) == quantity("1Gi")
    else:
        assert len({(r["pool"], r["device"]) for r in results}) == 2, results
        for result in results:
            assert "shareID" not in result, result
            assert "consumedCapacity" not in result, result
