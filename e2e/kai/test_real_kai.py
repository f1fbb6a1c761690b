"""Pods placed by the real KAI scheduler and bound by the real KAI binder (``KAI_BIN_DIR``,
``KAI_CRD_DIR``, ``KAI_VERSION``; see e2e/kai/real_kai.py). Skipped when no KAI build is given:
the module proxy these machines reach does not serve KAI's module (docs/kai.md).

What a build with consumable capacity (after v0.17.0, KAI PR #2102) must do, and what a build
without it does instead (whole devices), so the same tests show either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster
from e2e.cluster.client import Json
from e2e.dra_objects import pod_with_claim_template, quantity, share_template
from e2e.kai.real_kai import QUEUES, KaiBuild, install_crds, pod_group, queue, running_kai
from e2e.pods import claim_of, get_pod, only_result, running_pod, unschedulable_condition
from e2e.waiting import wait_for
from e2e.webhook.our_driver import Card
from vgpu_bridge.adapters.kai.adapter import has_consumable_capacity
from vgpu_bridge.core import DEFAULT

pytestmark = [pytest.mark.e2e, pytest.mark.needs_kai_build]
RESOURCE = "/apis/resource.k8s.io/v1"
PARENT, UNLIMITED, ONE_GPU, HALF_GPU = "e2e-parent", "e2e-unlimited", "e2e-one-gpu", "e2e-half-gpu"


@pytest.fixture(scope="package")
def kai_build() -> KaiBuild:
    build = KaiBuild.from_env()
    if build is None:
        pytest.skip("no KAI build given (KAI_BIN_DIR, KAI_CRD_DIR): KAI's module is not served")
    return build


@pytest.fixture(scope="package")
def real_kai(
    kai_build: KaiBuild,
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    kai_cards: dict[str, list[Card]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[KaiBuild]:
    install_crds(kube, kai_build.crd_dir)
    queues = [queue(PARENT), queue(UNLIMITED, parent=PARENT), queue(ONE_GPU, parent=PARENT,
              gpu_limit=1), queue(HALF_GPU, parent=PARENT, gpu_limit=0.5)]  # fmt: skip
    for body in queues:
        kube.create(QUEUES, body)
    workdir = tmp_path_factory.mktemp("kai")
    with running_kai(
        kai_build, e2e_cluster.kubeconfig, workdir, feature_gates="DRAConsumableCapacity=true"
    ):
        yield kai_build
        for log in sorted(workdir.glob("*.log")):
            print(f"--- {log.name}\n{log.read_text()[-4000:]}")
    for body in reversed(queues):
        kube.delete(f"{QUEUES}/{body['metadata']['name']}")


@pytest.fixture
def kai_ns(
    real_kai: KaiBuild, kai_namespace: Callable[[str], str], kubelet_standin: KubeletStandIn
) -> str:
    """A namespace under our webhook as docs/kai.md registers it; pods bound by KAI's binder
    to the fake nodes are marked Running by the kubelet stand-in."""
    return kai_namespace("first")


def submit(kube: KubeClient, ns: str, name: str, annotations: dict[str, str], q: str) -> Json:
    """A bare pod for KAI with its own PodGroup (what the podgrouper would make)."""
    kube.create(f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups", pod_group(name, q))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"kai.scheduler/queue": q},
            "annotations": {"pod-group-name": name, **annotations},
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "registry.invalid/e2e/no-image:never"}],
            "terminationGracePeriodSeconds": 0,
        },
    }
    created: Json = kube.create(f"/api/v1/namespaces/{ns}/pods", pod)
    return created


def results_of(kube: KubeClient, ns: str, names: list[str]) -> list[Json]:
    return [only_result(claim_of(kube, ns, running_pod(kube, ns, n, timeout_s=90))) for n in names]


def unschedulable_message(kube: KubeClient, ns: str, name: str, *, contains: str) -> str:
    def message() -> str | None:
        condition = unschedulable_condition(kube, ns, name)
        text = str((condition or {}).get("message", ""))
        return text if contains in text else None

    return wait_for(message, timeout_s=60, what=f"{ns}/{name} unschedulable with {contains!r}")


def assert_placed_as_shares_of_one_device(
    kube: KubeClient, ns: str, names: list[str], memory: str, build: KaiBuild
) -> None:
    if not has_consumable_capacity(build.version):
        # KAI <= v0.17.0 allocates with no DRA features: its CEL view of a device lacks
        # allowMultipleAllocations, so our DeviceClass (shareable devices only) matches nothing.
        for name in names:
            message = unschedulable_message(kube, ns, name, contains="cannot allocate all DRA")
            assert message.count("cannot allocate all DRA claims on node") == 2, message
        for name in names:
            assert not claim_of(kube, ns, get_pod(kube, ns, name))["status"].get("allocation")
        return
    results = results_of(kube, ns, names)
    assert len({(r["pool"], r["device"]) for r in results}) == 1, results
    for result in results:
        assert result["shareID"]
        assert quantity(result["consumedCapacity"]["memory"]) == quantity(memory)


def test_two_gpu_memory_pods_share_one_device(
    kube: KubeClient, kai_ns: str, real_kai: KaiBuild
) -> None:
    for name in ("mem-a", "mem-b"):
        submit(kube, kai_ns, name, {"gpu-memory": "10240"}, UNLIMITED)
    assert_placed_as_shares_of_one_device(kube, kai_ns, ["mem-a", "mem-b"], "10Gi", real_kai)


def test_gpu_fraction_pods_with_one_card_size(
    kube: KubeClient, kai_ns: str, real_kai: KaiBuild
) -> None:
    for name in ("frac-a", "frac-b"):
        submit(kube, kai_ns, name, {"gpu-fraction": "0.5"}, UNLIMITED)
    assert_placed_as_shares_of_one_device(kube, kai_ns, ["frac-a", "frac-b"], "40Gi", real_kai)


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
    submit(kube, kai_ns, "small", annotations, HALF_GPU)
    message = unschedulable_message(kube, kai_ns, "small", contains="OverLimit")
    assert "Limit is 0.5 GPUs" in message, message
    assert f"workload requested {gpus} GPUs" in message, message


def test_one_gpu_queue_runs_one_share_at_a_time(
    kube: KubeClient, kai_ns: str, real_kai: KaiBuild
) -> None:
    """A queue with `gpu.limit: 1` runs one 1 GiB share at a time, though a card holds 80."""
    if not has_consumable_capacity(real_kai.version):
        pytest.skip(f"KAI {real_kai.version} places none of our shares (see the tests above)")
    submit(kube, kai_ns, "small-a", {"gpu-memory": "1024"}, ONE_GPU)
    running_pod(kube, kai_ns, "small-a", timeout_s=90)
    submit(kube, kai_ns, "small-b", {"gpu-memory": "1024"}, ONE_GPU)
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
    if has_consumable_capacity(real_kai.version):
        for result in results:
            assert result["shareID"]
            assert quantity(result["consumedCapacity"]["memory"]) == quantity("1Gi")
    else:
        assert len({(r["pool"], r["device"]) for r in results}) == 2, results
        for result in results:
            assert "shareID" not in result, result
            assert "consumedCapacity" not in result, result
