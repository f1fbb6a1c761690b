"""Volcano's real vc-scheduler placing HAMi and Volcano GPU requests on NVIDIA's DRA driver
(`gpu.nvidia.com`, `--consumable-shares=100`) through our webhook with profile `nvidia`.

Each translated claim asks for two devices: a share of NVIDIA's card (`memory`, and `shares` as
the SM percent) and our node's enforcer device, which is what puts libvgpu's limits into the
container at Prepare. The cards are NVIDIA-shaped (e2e/nvidia/slices.py): two H100s on the first
node, where our agent runs in enforcer mode (it publishes the enforcer device, and the kubelet
stand-in prepares the pods Volcano binds through it), one on the second node, where it does not.
So these tests also show a share failing closed: vc-scheduler never places one where no enforcer
is, and each share Volcano places gets its limits file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster
from e2e.cluster.client import Json
from e2e.dra_objects import quantity
from e2e.node.agent import AgentProcess, GrpcPreparer, running_agent
from e2e.nvidia.cluster import (
    ENFORCER_DEVICE,
    ENFORCER_DRIVER,
    nvidia_and_enforcer_classes,
    parse_limits,
    publish_nvidia_cards,
    remove_slices,
    slices_of,
)
from e2e.nvidia.slices import NVIDIA_DEVICE_CLASS, NVIDIA_DRIVER, NvidiaCard
from e2e.pods import running_pod
from e2e.volcano.components import Volcano
from e2e.volcano.objects import (
    GANG_ANNOTATION,
    JOBS,
    PODGROUPS,
    QUEUES,
    claims,
    create_job,
    gang_gets_nothing,
    job_podgroup,
    job_pods,
    open_queue,
    pod_claims,
    running,
    task,
    vcjob,
    volcano_pod,
)
from e2e.waiting import stays, wait_for
from e2e.webhook.helpers import create_pod, serve_namespace
from e2e.webhook.process import WebhookProcess, running_webhook

pytestmark = pytest.mark.e2e
#: Our `nvidia` webhook answers only in namespaces with this label (the package's other one not).
NAMESPACE_LABEL = "e2e.vgpu-bridge.io/volcano-nvidia-webhook"
#: Words no PodGroup minResources key may hold: neither share nor enforcer is an extended resource.
GPU_WORDS = ("gpu", "nvidia", "enforcer", "vgb")
ENFORCER_CLASS = "enforcer.vgb.io"
#: The claim request names the `nvidia` profile writes: NVIDIA's share and our enforcer.
GPU_REQUEST, ENFORCER_REQUEST = "gpu", "vgpu-limits"
#: Two cards on the node our agent enforces, one on the node it does not run on.
ENFORCED_CARDS = [NvidiaCard(minor=i, uuid=f"GPU-vc-enforced-{i:04d}") for i in range(2)]
BARE_CARDS = [NvidiaCard(minor=0, uuid="GPU-vc-bare-0000")]


@pytest.fixture(scope="module")
def enforcer(
    kube: KubeClient, e2e_cluster: LocalCluster, fake_nodes: list[str]
) -> Iterator[AgentProcess]:
    """NVIDIA's classes and slices (`--consumable-shares=100`) on both nodes; our agent in
    enforcer mode on the first only, publishing its enforcer device there."""
    enforced, bare = fake_nodes
    enforce = {"VGPU_BRIDGE_ENFORCE_DRIVER": NVIDIA_DRIVER}
    with nvidia_and_enforcer_classes(kube):
        try:
            publish_nvidia_cards(kube, enforced, ENFORCED_CARDS, "100")
            publish_nvidia_cards(kube, bare, BARE_CARDS, "100")
            with running_agent(
                enforced, e2e_cluster.kubeconfig, None, driver=ENFORCER_DRIVER, extra_env=enforce
            ) as agent:
                wait_for(
                    lambda: slices_of(kube, enforced, ENFORCER_DRIVER),
                    what="the enforcer's slice",
                )
                yield agent
        finally:
            for node in fake_nodes:
                remove_slices(kube, node, NVIDIA_DRIVER, ENFORCER_DRIVER)


@pytest.fixture(scope="module")
def nvidia_webhook(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    volcano: Volcano,
    enforcer: AgentProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookProcess]:
    args = ["--profile", "nvidia", "--nvidia-consumable-shares", "100"]
    with running_webhook(
        kube,
        e2e_cluster.kubeconfig,
        tmp_path_factory.mktemp("volcano-nvidia-webhook"),
        grace_s=3,
        namespace_label=NAMESPACE_LABEL,
        extra_args=args,
    ) as process:
        yield process


@pytest.fixture
def nvns(
    kube: KubeClient,
    namespace: str,
    volcano: Volcano,
    nvidia_webhook: WebhookProcess,
    enforcer: AgentProcess,
    kubelet_standin: KubeletStandIn,
) -> Iterator[str]:
    """A namespace our `nvidia` webhook translates; the pods Volcano binds are prepared through
    our enforcer (as the kubelet would), and unprepared when the test's pods are deleted."""
    serve_namespace(kube, namespace, NAMESPACE_LABEL)
    preparer = GrpcPreparer(enforcer.dra_socket)
    kubelet_standin.preparer = preparer
    yield namespace
    for job in kube.items(JOBS.format(ns=namespace)):  # not restarted when its pods go
        kube.delete(f"{JOBS.format(ns=namespace)}/{job['metadata']['name']}")
    for pod in kube.items(f"/api/v1/namespaces/{namespace}/pods"):
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")
    wait_for(lambda: not claims(kube, namespace), timeout_s=60, what="the claims released")
    preparer.close()
    assert volcano.alive(), "a Volcano component exited during the test"
    for name, log in {**volcano.logs(), "webhook": nvidia_webhook.log_file}.items():
        text = log.read_text(errors="replace") if log.exists() else ""
        print(f"--- {name} (last lines) ---\n" + "\n".join(text.splitlines()[-60:]))


def all_running(kube: KubeClient, ns: str, job: str, count: int) -> list[Json]:
    def probe() -> list[Json] | None:
        pods = running(job_pods(kube, ns, job))
        return pods if len(pods) == count else None

    return wait_for(probe, timeout_s=90, what=f"{count} pods of vcjob {job} Running")


@dataclass(frozen=True)
class Share:
    """What one pod got: its claim, NVIDIA's result, and the limits file our enforcer wrote."""

    claim: Json
    gpu: Json
    limits: dict[str, str]

    @property
    def uuid(self) -> str:
        cards = {card.device_name: card.uuid for card in ENFORCED_CARDS}
        return cards[self.gpu["device"]]

    @property
    def memory_limit(self) -> str:
        return self.limits[f"CUDA_DEVICE_MEMORY_LIMIT_{self.uuid}"]

    @property
    def sm_limit(self) -> str:
        return self.limits.get(f"CUDA_DEVICE_SM_LIMIT_{self.uuid}", "0")


def nvidia_share(kube: KubeClient, ns: str, pod: Json, agent: AgentProcess) -> Share:
    """The pod's one claim, checked to hold one share of NVIDIA's card and our enforcer device
    on the pod's node, and what our enforcer prepared for it."""
    [claim] = pod_claims(kube, ns, pod)
    results = claim["status"]["allocation"]["devices"]["results"]
    by_request = {r["request"]: r for r in results}
    assert len(results) == 2, results
    assert set(by_request) == {GPU_REQUEST, ENFORCER_REQUEST}, results
    gpu, enforcer = by_request[GPU_REQUEST], by_request[ENFORCER_REQUEST]
    node = pod["spec"]["nodeName"]
    assert (gpu["driver"], gpu["pool"]) == (NVIDIA_DRIVER, node), gpu
    assert (enforcer["driver"], enforcer["pool"], enforcer["device"]) == (
        ENFORCER_DRIVER,
        node,
        ENFORCER_DEVICE,
    ), enforcer
    assert gpu["shareID"], gpu
    assert enforcer["shareID"], enforcer
    assert [r["name"] for r in claim["status"].get("reservedFor") or []] == [
        pod["metadata"]["name"]
    ]
    limits = agent.layout.limits_path(claim["metadata"]["uid"]).read_text()
    return Share(claim, dict(gpu), parse_limits(limits))


def enforcer_config(claim_spec: Json) -> Json:
    """The opaque parameters the claim gives our enforcer (and no one else)."""
    [config] = claim_spec["devices"]["config"]
    assert config["requests"] == [ENFORCER_REQUEST], config
    assert config["opaque"]["driver"] == ENFORCER_DRIVER, config
    parameters: Json = config["opaque"]["parameters"]
    return parameters


def assert_no_gpu_keys(group: Json) -> None:
    keys = list(group["spec"].get("minResources") or {})
    assert not [k for k in keys if any(word in k.lower() for word in GPU_WORDS)], keys


def assert_every_container_gets_the_enforcer(pod_spec: Json) -> None:
    """A container entry naming only NVIDIA's request would not get our CDI edits (the
    libvgpu mounts and limits): the translation names no request, so each gets both."""
    for container in pod_spec["containers"]:
        for entry in container["resources"]["claims"]:
            assert "request" not in entry, entry


def test_vcjob_of_hami_and_volcano_tasks_gets_nvidia_shares_held_to_their_limits(
    kube: KubeClient, nvns: str, fake_nodes: list[str], enforcer: AgentProcess
) -> None:
    """4 pods of 30000Mi on the two enforced cards (two per card); the unenforced third card
    has room but gets none. Each share books its gpucores/vgpu-cores as NVIDIA's shares, and our
    enforcer holds each pod to its share of its card (by the card's UUID)."""
    worker = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000, "nvidia.com/gpucores": 50}
    ps = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 30000, "volcano.sh/vgpu-cores": 25}
    job = vcjob(
        "train",
        [task("worker", 2, {"limits": worker}), task("ps", 2, {"limits": ps})],
        min_available=4,
    )
    created = create_job(kube, nvns, job)
    for t in created["spec"]["tasks"]:
        spec = t["template"]["spec"]
        assert spec["resourceClaims"], t
        assert "limits" not in spec["containers"][0]["resources"], t
        assert_every_container_gets_the_enforcer(spec)

    pods = all_running(kube, nvns, "train", 4)
    shares_by_task = {"worker": 50, "ps": 25}
    cards: Counter[str] = Counter()
    for pod in pods:
        assert pod["spec"]["nodeName"] == fake_nodes[0]  # the node without enforcer gets none
        share = nvidia_share(kube, nvns, pod, enforcer)
        cores = shares_by_task[pod["metadata"]["labels"]["e2e-task"]]
        consumed = share.gpu["consumedCapacity"]
        assert quantity(consumed["memory"]) == quantity("30000Mi")
        assert quantity(consumed["shares"]) == cores
        assert (share.memory_limit, share.sm_limit) == ("30000m", str(cores))
        cards[share.gpu["device"]] += 1
    assert cards == {"gpu-0": 2, "gpu-1": 2}, cards
    group = job_podgroup(kube, nvns, "train")
    assert group is not None
    assert group["spec"]["minMember"] == 4
    assert quantity(group["spec"]["minResources"]["cpu"]) == quantity("400m")
    assert_no_gpu_keys(group)


def test_plain_volcano_pod_gets_its_share_its_sm_limit_and_priority(
    kube: KubeClient, nvns: str, fake_nodes: list[str], enforcer: AgentProcess
) -> None:
    """pg-controller groups a plain pod; vc-scheduler allocates NVIDIA's share and the enforcer;
    the claim tells the enforcer the SM limit (25) and the priority (1) libvgpu is to hold."""
    limits = {
        "nvidia.com/gpu": 1,
        "nvidia.com/gpumem": 5000,
        "nvidia.com/gpucores": 25,
        "nvidia.com/priority": 1,
    }
    created = create_pod(kube, nvns, volcano_pod("solo", limits))
    assert "limits" not in created["spec"]["containers"][0]["resources"], created["spec"]
    assert_every_container_gets_the_enforcer(created["spec"])
    pod = running_pod(kube, nvns, "solo", timeout_s=90)
    assert pod["spec"]["nodeName"] == fake_nodes[0]
    share = nvidia_share(kube, nvns, pod, enforcer)
    assert quantity(share.gpu["consumedCapacity"]["memory"]) == quantity("5000Mi")
    assert quantity(share.gpu["consumedCapacity"]["shares"]) == 25
    assert (share.memory_limit, share.sm_limit) == ("5000m", "25")
    assert share.limits["CUDA_TASK_PRIORITY"] == "1"
    claim = share.claim
    requests = {r["name"]: r["exactly"] for r in claim["spec"]["devices"]["requests"]}
    assert requests[GPU_REQUEST]["deviceClassName"] == NVIDIA_DEVICE_CLASS
    assert requests[ENFORCER_REQUEST]["deviceClassName"] == ENFORCER_CLASS
    assert "capacity" not in requests[ENFORCER_REQUEST]
    parameters = enforcer_config(claim["spec"])
    assert (parameters["cores"], parameters["priority"]) == (25, 1)
    group_name = pod["metadata"]["annotations"][GANG_ANNOTATION]
    assert_no_gpu_keys(kube.get(f"{PODGROUPS.format(ns=nvns)}/{group_name}"))


def test_gang_that_fits_only_with_the_unenforced_card_stays_pending(
    kube: KubeClient, nvns: str
) -> None:
    """3 shares of 50000Mi: one per card, and there are three cards, but only two where our
    enforcer runs. A share without its limits is never handed out: the gang gets nothing."""
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 50000}
    create_job(kube, nvns, vcjob("wide", [task("w", 3, {"limits": limits})], min_available=3))
    gang_gets_nothing(kube, nvns, "wide", 3)


@pytest.fixture
def nvidia_queue(kube: KubeClient) -> Iterator[str]:
    """A queue that may hold 40Gi, 100 shares and 2 devices of NVIDIA's class; the enforcer's
    class is not named, which Volcano's capacity plugin takes as unlimited."""
    capability = {
        f"memory.deviceclass/{NVIDIA_DEVICE_CLASS}": "40Gi",
        f"shares.deviceclass/{NVIDIA_DEVICE_CLASS}": "100",
        f"deviceclass/{NVIDIA_DEVICE_CLASS}": "2",
    }
    with open_queue(kube, capability) as name:
        yield name


def test_queue_capacity_counts_nvidia_shares_and_not_the_enforcer(
    kube: KubeClient, nvns: str, nvidia_queue: str
) -> None:
    """30Gi with 10 shares runs; 20Gi more waits on the queue's 40Gi of NVIDIA's class, not on
    the cards (they have 160Gi where the enforcer runs)."""
    limits = {"nvidia.com/gpumem": 30720, "nvidia.com/gpucores": 10}
    first = vcjob("first", [task("w", 1, {"limits": limits})], min_available=1, queue=nvidia_queue)
    create_job(kube, nvns, first)
    all_running(kube, nvns, "first", 1)
    status = kube.get(f"{QUEUES}/{nvidia_queue}")["status"]
    allocated_now = status["allocated"]
    assert quantity(allocated_now[f"memory.deviceclass/{NVIDIA_DEVICE_CLASS}"]) == quantity("30Gi")
    assert quantity(allocated_now[f"shares.deviceclass/{NVIDIA_DEVICE_CLASS}"]) == 10
    assert quantity(allocated_now[f"deviceclass/{NVIDIA_DEVICE_CLASS}"]) == 1

    limits = {"nvidia.com/gpumem": 20480}
    second = vcjob(
        "second", [task("w", 1, {"limits": limits})], min_available=1, queue=nvidia_queue
    )
    create_job(kube, nvns, second)
    wait_for(lambda: job_pods(kube, nvns, "second"), timeout_s=30, what="the pod of second")

    def unbound() -> bool:
        return all(not p["spec"].get("nodeName") for p in job_pods(kube, nvns, "second"))

    stays(unbound, for_s=8, what="second waiting for the queue's NVIDIA memory")
