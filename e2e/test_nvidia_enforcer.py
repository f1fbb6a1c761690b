"""HAMi pods on NVIDIA's DRA driver, held to their shares by our enforcer (issue 37), on the real
control plane: NVIDIA-shaped slices (e2e/nvidia/slices.py) in each `--consumable-shares` mode our
profile supports, our agent in enforcer mode publishing its one `enforcer` device, the webhook
with profile nvidia, and the real kube-scheduler allocating both requests of each claim. The
kubelet stand-in prepares the pods through our agent, whose limits file must carry NVIDIA's card
UUID with the share's MiB and SM percent. NVIDIA's own plugin does not run here: in this tier
nothing prepares its results (the real-node tier has a stand-in that does)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster, create_fake_node
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
    results_by_driver,
    slices_of,
)
from e2e.nvidia.slices import NVIDIA_DRIVER, NvidiaCard, mock_uuid
from e2e.pods import get_pod, running_pod, unschedulable_condition
from e2e.upstream_examples import hami_examples
from e2e.waiting import stays, wait_for
from e2e.webhook.helpers import create_pod, gpu_pod, serve_namespace
from e2e.webhook.process import WebhookProcess, running_webhook

pytestmark = pytest.mark.e2e
RESOURCE = "/apis/resource.k8s.io/v1"
MIB = 2**20
LABEL = "e2e.vgpu-bridge.io/nvidia-webhook"
#: NVIDIA's modes our profile takes (`disabled` publishes no shares: nothing to share); 4 is an
#: N other than 100 (NVIDIA's own tests use it), where shares are no longer percents
MODES = ["100", "4", "memory", "unlimited"]
CARD = NvidiaCard(minor=0, uuid=mock_uuid(0))  # the mock's H100: 80Gi
CARD_MIB = CARD.memory_bytes // MIB
#: HAMi's own example (../shared/upstream-examples/hami), applied as users apply it
UPSTREAM_EXAMPLES = hami_examples()


@dataclass(frozen=True)
class NvidiaPool:
    """One mode's nodes: `node` has NVIDIA's card and our enforcer, `bare` NVIDIA's card only."""

    mode: str
    node: str
    bare: str
    agent: AgentProcess
    webhook: WebhookProcess

    @property
    def books_shares(self) -> bool:
        return self.mode.isdigit()

    def shares_booked(self, cores: int = 0) -> str | None:
        """NVIDIA's `shares` a share of `cores` percent consumes: ceil(cores*N/100), the policy's
        default 1 without cores; None in the modes that publish no shares."""
        if not self.books_shares:
            return None
        return str(-(-cores * int(self.mode) // 100) if cores else 1)


@pytest.fixture(scope="module")
def _classes(kube: KubeClient) -> Iterator[None]:
    with nvidia_and_enforcer_classes(kube):
        yield


@pytest.fixture(scope="module", params=MODES, ids=[f"consumable-shares={m}" for m in MODES])
def pool(
    request: pytest.FixtureRequest,
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    _classes: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[NvidiaPool]:
    mode: str = request.param
    token = secrets.token_hex(3)
    node, bare = f"e2e-nv-{token}", f"e2e-nv-bare-{token}"
    for name in (node, bare):
        create_fake_node(kube, name)
        publish_nvidia_cards(kube, name, [CARD], mode)
    enforce = {"VGPU_BRIDGE_ENFORCE_DRIVER": NVIDIA_DRIVER}
    workdir = tmp_path_factory.mktemp(f"nvidia-webhook-{mode}")
    nvidia_args = ["--profile", "nvidia", "--nvidia-consumable-shares", mode]
    try:
        with running_agent(
            node, e2e_cluster.kubeconfig, None, driver=ENFORCER_DRIVER, extra_env=enforce
        ) as agent:
            wait_for(lambda: slices_of(kube, node, ENFORCER_DRIVER), what="the enforcer's slice")
            preparer = GrpcPreparer(agent.dra_socket)
            with (
                KubeletStandIn(kube, [node, bare], preparer=preparer),
                running_webhook(
                    kube,
                    e2e_cluster.kubeconfig,
                    workdir,
                    grace_s=None,
                    namespace_label=LABEL,
                    config_name=f"gpu-sharing-e2e-nvidia-{token}",
                    extra_args=nvidia_args,
                ) as webhook,
            ):
                yield NvidiaPool(mode, node, bare, agent, webhook)
                print(webhook.log()[-4000:])  # shown by pytest for failed tests
            preparer.close()
    finally:
        for name in (node, bare):
            remove_slices(kube, name, NVIDIA_DRIVER, ENFORCER_DRIVER)
            kube.delete(f"/api/v1/nodes/{name}")


@pytest.fixture
def ns(kube: KubeClient, namespace: str, pool: NvidiaPool) -> Iterator[str]:
    """A namespace the mode's webhook translates; its pods and claims are gone after the test."""
    serve_namespace(kube, namespace, LABEL)
    yield namespace
    for pod in kube.items(f"/api/v1/namespaces/{namespace}/pods"):
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")
    wait_for(
        lambda: not kube.items(f"{RESOURCE}/namespaces/{namespace}/resourceclaims"),
        timeout_s=60,
        what="the test's claims to be released",
    )


def hami_pod(name: str, limits: dict[str, int] | None = None, *, node: str | None = None) -> Json:
    """A HAMi pod with these `nvidia.com/<name>` limits (`gpu: 1` unless given)."""
    asked = {"gpu": 1, **(limits or {})}
    pod = gpu_pod(name, {f"nvidia.com/{k}": v for k, v in asked.items()})
    if node is not None:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


@dataclass(frozen=True)
class Share:
    """What one pod got: NVIDIA's result, our enforcer's result, and our limits for the card."""

    claim: Json
    gpu: Json
    enforcer: Json
    limits: dict[str, str]

    @property
    def memory_mib(self) -> int:
        return int(quantity(self.gpu["consumedCapacity"]["memory"]) / MIB)

    @property
    def limit_mib(self) -> str:
        return self.limits[f"CUDA_DEVICE_MEMORY_LIMIT_{CARD.uuid}"]

    @property
    def sm_limit(self) -> str:
        return self.limits[f"CUDA_DEVICE_SM_LIMIT_{CARD.uuid}"]


def share_of(kube: KubeClient, ns: str, name: str, pool: NvidiaPool) -> Share:
    """The running pod's one claim: one NVIDIA result and one enforcer result, both on the pool's
    node; and the limits file our agent wrote for it."""
    pod = running_pod(kube, ns, name)
    [status] = pod["status"]["resourceClaimStatuses"]
    claim = kube.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{status['resourceClaimName']}")
    results = results_by_driver(claim)
    assert sorted(results) == [ENFORCER_DRIVER, NVIDIA_DRIVER], results
    [gpu], [enforcer] = results[NVIDIA_DRIVER], results[ENFORCER_DRIVER]
    assert (gpu["pool"], gpu["device"]) == (pool.node, CARD.device_name)
    assert (enforcer["pool"], enforcer["device"]) == (pool.node, ENFORCER_DEVICE)
    text = pool.agent.layout.limits_path(claim["metadata"]["uid"]).read_text()
    return Share(claim, gpu, enforcer, parse_limits(text))


def test_the_agent_publishes_its_enforcer_device_and_no_gpu(
    kube: KubeClient, pool: NvidiaPool
) -> None:
    [enforcer_slice] = slices_of(kube, pool.node, ENFORCER_DRIVER)
    [device] = enforcer_slice["spec"]["devices"]
    assert device["name"] == ENFORCER_DEVICE
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"] == {"enforces": {"string": NVIDIA_DRIVER}}
    assert enforcer_slice["spec"]["pool"]["name"] == pool.node
    every_driver = {s["spec"]["driver"] for s in kube.items(f"{RESOURCE}/resourceslices")}
    on_node = {d for d in every_driver if slices_of(kube, pool.node, d)}
    assert on_node == {NVIDIA_DRIVER, ENFORCER_DRIVER}


def test_hami_shares_land_on_nvidias_card_each_held_to_its_own_share(
    kube: KubeClient, ns: str, pool: NvidiaPool
) -> None:
    asked: dict[str, dict[str, int]] = {
        "by-mib": {"gpumem": 10000},
        "by-percent": {"gpumem-percentage": 25},
        "with-cores": {"gpumem": 4096, "gpucores": 30},
    }
    # MiB booked; shares booked (the <N> mode only: 1 is its policy default; gpucores 30 is 30
    # of 100 shares, 2 of 4); SM limit applied (the 30% asked, also where 2 of 4 shares are 50%)
    expected = {
        "by-mib": (10000, pool.shares_booked(), "0"),
        "by-percent": (20480, pool.shares_booked(), "0"),
        "with-cores": (4096, pool.shares_booked(30), "30"),
    }
    for name, limits in asked.items():
        create_pod(kube, ns, hami_pod(name, limits))

    shares = {name: share_of(kube, ns, name, pool) for name in asked}

    for name, (mib, booked, sm) in expected.items():
        share = shares[name]
        assert share.memory_mib == mib, name
        assert share.gpu["consumedCapacity"].get("shares") == booked, name
        assert (share.limit_mib, share.sm_limit) == (f"{mib}m", sm), name
    assert len({s.gpu["shareID"] for s in shares.values()}) == len(
        shares
    )  # three shares of one card


def test_a_whole_card_books_all_of_nvidias_memory_and_every_share(
    kube: KubeClient, ns: str, pool: NvidiaPool
) -> None:
    create_pod(kube, ns, hami_pod("whole"))

    share = share_of(kube, ns, "whole", pool)

    assert share.memory_mib == CARD_MIB
    assert share.gpu["consumedCapacity"].get("shares") == pool.shares_booked(100)  # N of N
    assert (share.limit_mib, share.sm_limit) == (f"{CARD_MIB}m", "100")


def test_gpucores_100_keeps_the_card_only_where_nvidia_publishes_shares(
    kube: KubeClient, ns: str, pool: NvidiaPool
) -> None:
    create_pod(kube, ns, hami_pod("alone", {"gpumem": 1000, "gpucores": 100}))
    alone = share_of(kube, ns, "alone", pool)
    assert alone.sm_limit == "100"

    create_pod(kube, ns, hami_pod("second", {"gpumem": 1000}))

    if pool.books_shares:  # all N shares are booked: HAMi's exclusive card
        assert alone.gpu["consumedCapacity"]["shares"] == pool.mode
        wait_for(lambda: unschedulable_condition(kube, ns, "second"), what="second unschedulable")
        stays(
            lambda: not get_pod(kube, ns, "second")["spec"].get("nodeName"), for_s=2, what="unbound"
        )
    else:  # cores cannot be booked in this mode: the card is shared (the webhook warns)
        assert share_of(kube, ns, "second", pool).gpu["device"] == CARD.device_name


def test_a_node_without_the_enforcer_gets_no_share(
    kube: KubeClient, ns: str, pool: NvidiaPool
) -> None:
    create_pod(kube, ns, hami_pod("no-enforcer", {"gpumem": 1000}, node=pool.bare))

    condition = wait_for(
        lambda: unschedulable_condition(kube, ns, "no-enforcer"), what="an unschedulable pod"
    )
    assert "cannot allocate all claims" in condition.get("message", ""), condition
    assert not get_pod(kube, ns, "no-enforcer")["spec"].get("nodeName")


def test_hamis_default_use_example_runs_unchanged_held_to_3000_mib_and_30_percent(
    kube: KubeClient, ns: str, pool: NvidiaPool
) -> None:
    example = yaml.safe_load((UPSTREAM_EXAMPLES / "default_use.yaml").read_text())

    create_pod(kube, ns, example)

    share = share_of(kube, ns, example["metadata"]["name"], pool)
    assert (share.memory_mib, share.limit_mib, share.sm_limit) == (3000, "3000m", "30")
    assert share.gpu["consumedCapacity"].get("shares") == pool.shares_booked(30)


def test_deleting_the_pods_leaves_no_limits_file_spec_or_claim_dir(
    kube: KubeClient, ns: str, pool: NvidiaPool
) -> None:
    create_pod(kube, ns, hami_pod("short-lived", {"gpumem": 2048}))
    uid = share_of(kube, ns, "short-lived", pool).claim["metadata"]["uid"]
    layout = pool.agent.layout
    assert layout.spec_path(uid).exists()
    assert layout.shared_dir(uid).is_dir()

    kube.delete(f"/api/v1/namespaces/{ns}/pods/short-lived")

    wait_for(lambda: not layout.limits_path(uid).exists(), timeout_s=30, what="limits removed")
    assert not layout.spec_path(uid).exists()
    assert not layout.shared_dir(uid).exists()
