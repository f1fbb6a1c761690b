"""HAMi pods on NVIDIA's DRA driver held to their shares by our enforcer, on the real node
(issue 37): a real kubelet, containerd and runc; a stand-in for NVIDIA's kubelet plugin
(e2e/nvidia/standin_plugin.py: NVIDIA's slice in the `--consumable-shares=100` mode, NVIDIA's
transient CDI spec with the card's /dev/nvidia<minor>, NVIDIA_VISIBLE_DEVICES=void and the
driver's libraries) registered beside our agent in enforcer mode, and our webhook with profile
nvidia. Each claim has NVIDIA's request and our enforcer's; the kubelet prepares both drivers and
containerd applies both specs. Inside each container (the CUDA image holds no driver library)
the fake driver sees the card only through NVIDIA's device node, as the real one does, and
libvgpu from our spec refuses allocations past the share, keyed by NVIDIA's UUID. Deleting the
pods leaves nothing of either driver behind.

Collected only with ``VGPU_REALNODE=1`` (``make e2e-realnode``); see conftest.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.cluster import LocalCluster, Settings
from e2e.cluster.client import Json, KubeClient
from e2e.nvidia.cluster import (
    ENFORCER_DEVICE,
    ENFORCER_DRIVER,
    nvidia_and_enforcer_classes,
    parse_limits,
    results_by_driver,
)
from e2e.nvidia.slices import NVIDIA_DRIVER, NvidiaCard, mock_uuid
from e2e.nvidia.standin_plugin import DriverFiles, NvidiaStandIn, spec_path
from e2e.realnode.agent import (
    CONTAINER_LIBVGPU,
    install_libvgpu,
    launch_agent,
    vgpu_dir,
    wait_published,
)
from e2e.realnode.driver_root import LIBRARY_DIR
from e2e.realnode.node import CUDA_IMAGE, RealNode
from e2e.realnode.product import gone, parse
from e2e.realnode.spike import node_and_cluster, node_pod, pod_log
from e2e.waiting import wait_for
from e2e.webhook.process import running_webhook

pytestmark = pytest.mark.e2e

RESOURCE = "/apis/resource.k8s.io/v1"
LABEL = "e2e.vgpu-bridge.io/realnode-nvidia-webhook"
NAMESPACE = "realnode-nvidia"
#: minor 1, so the card's identity can only come from NVIDIA's device node (index 0 in the pod)
CARD = NvidiaCard(minor=1, uuid=mock_uuid(1))
CHUNK_MIB = 50
HOLD_S = 600
CUDA_ERROR_OUT_OF_MEMORY = 2


@dataclass(frozen=True)
class NvidiaNode:
    cluster: LocalCluster
    node: RealNode
    plugin: NvidiaStandIn

    @property
    def client(self) -> KubeClient:
        return self.cluster.client()


@pytest.fixture(scope="module")
def nvidia_node(
    e2e_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NvidiaNode]:
    log: list[str] = []
    try:
        with node_and_cluster(e2e_settings, log=log, with_native=True) as (cluster, node):
            yield from _with_nvidia_and_us(cluster, node, tmp_path_factory.mktemp("webhook"))
    finally:
        print("\n".join(log))


def _with_nvidia_and_us(
    cluster: LocalCluster, node: RealNode, workdir: Path
) -> Iterator[NvidiaNode]:
    """NVIDIA's stand-in plugin, then our agent as its enforcer, then our webhook (profile
    nvidia, 100 shares) for NAMESPACE."""
    assert node.native is not None
    assert node.driver_root is not None
    client = cluster.client()
    plugin = NvidiaStandIn(
        client,
        node=node.name,
        cards=[CARD],
        kubelet_dir=node.layout.kubelet_dir,
        cdi_dir=node.layout.cdi_dir,
        dev_dir=node.layout.root / "nvidia-standin" / "dev",
        files=DriverFiles(node.driver_root, LIBRARY_DIR),
    )
    with nvidia_and_enforcer_classes(client):
        plugin.start()
        try:
            assert plugin.registration.registered.wait(60), plugin.registration.last_error
            install_libvgpu(node.layout, node.native)
            environ = {k: v for k, v in os.environ.items() if not k.startswith("VGPU_")}
            environ["VGPU_BRIDGE_ENFORCE_DRIVER"] = NVIDIA_DRIVER
            agent = launch_agent(node, cluster, environ, [], driver=ENFORCER_DRIVER)
            wait_published(node, cluster, agent, published=1, driver=ENFORCER_DRIVER)
            args = ["--profile", "nvidia", "--nvidia-consumable-shares", "100"]
            with running_webhook(
                client, cluster.kubeconfig, workdir, grace_s=3, namespace_label=LABEL,
                extra_args=args,
            ):  # fmt: skip
                client.create("/api/v1/namespaces", _labelled_namespace())
                yield NvidiaNode(cluster, node, plugin)
                for name in ("kubelet", "node-agent"):
                    print(f"--- {name} (tail) ---\n{node.component(name).log_tail(40)}")
        finally:
            plugin.stop()


def _labelled_namespace() -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {LABEL: "true"}},
    }


def hami_cuda_pod(name: str, node_name: str, limits: dict[str, int]) -> Json:
    """A HAMi pod whose CUDA program allocates to its limit, then runs NVIDIA's nvidia-smi (from
    NVIDIA's spec) and holds what it got."""
    container = {
        "name": "cuda",
        "image": CUDA_IMAGE,
        "args": [str(CHUNK_MIB), str(HOLD_S), "/usr/bin/nvidia-smi"],
        "resources": {"limits": {f"nvidia.com/{k}": v for k, v in {"gpu": 1, **limits}.items()}},
    }
    return node_pod(name, node_name, container)


def test_hami_pods_on_nvidias_card_each_held_to_its_own_share(nvidia_node: NvidiaNode) -> None:
    client, node, plugin = nvidia_node.client, nvidia_node.node, nvidia_node.plugin
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    asked = {"small": {"gpumem": 1000}, "cores": {"gpumem": 2000, "gpucores": 30}}
    expected = {"small": (1000, "0"), "cores": (2000, "30")}  # MiB, SM percent
    for name, limits in asked.items():
        created = client.create(pods, hami_cuda_pod(name, node.name, limits))
        assert created["spec"].get("resourceClaims"), created["spec"]  # translated

    def outputs() -> dict[str, str] | None:
        """Each pod's output once both have hit their limit and hold it (both Running)."""
        found = {}
        for name in asked:
            pod = client.get(f"{pods}/{name}")
            assert pod["status"].get("phase") in ("Pending", "Running"), pod["status"]
            output = pod_log(node, pod, "cuda")
            if pod["status"].get("phase") != "Running" or "program_status=" not in output:
                return None
            found[name] = output
        return found

    held = wait_for(outputs, timeout_s=180, what="both CUDA pods holding their shares")

    claims = {}
    for name, (mib, sm) in expected.items():
        values = parse(held[name])
        # the card, seen only through NVIDIA's /dev/nvidia1 and NVIDIA's mounted libraries
        assert values["smi.count"] == ["1"], held[name]
        assert values["smi.uuid"] == [CARD.uuid], held[name]
        assert values["smi.library"] == [f"/{LIBRARY_DIR}/libnvidia-ml.so.1"], held[name]
        # our spec: libvgpu preloaded, the share's limits; the driver refuses past the share
        assert values["preload"] == [CONTAINER_LIBVGPU], held[name]
        assert CONTAINER_LIBVGPU in values.get("mapped", []), held[name]
        assert values["env.CUDA_DEVICE_MEMORY_LIMIT_0"] == [f"{mib}m"], held[name]
        assert values["init_error"] == ["0"], held[name]
        assert values["total_mib"] == [str(mib)], held[name]
        assert values["alloc_error"] == [str(CUDA_ERROR_OUT_OF_MEMORY)], held[name]
        assert mib - CHUNK_MIB < int(values["allocated_mib"][0]) <= mib, held[name]
        claim = _claim_of(client, name)
        claims[name] = claim
        _assert_both_drivers_prepared(nvidia_node, claim, mib=mib, sm=sm)
    gpu_shares = {results_by_driver(c)[NVIDIA_DRIVER][0]["shareID"] for c in claims.values()}
    assert len(gpu_shares) == 2  # two shares of the one card

    for name in asked:
        client.delete(f"{pods}/{name}")
    wait_for(
        lambda: all(gone(client, f"{pods}/{name}") for name in asked),
        timeout_s=60,
        what="the pods deleted by the kubelet",
    )
    uids = {c["metadata"]["uid"] for c in claims.values()}
    wait_for(lambda: uids <= set(plugin.unprepare_calls), timeout_s=60, what="NVIDIA's unprepare")
    wait_for(
        lambda: not _entries(node.layout.cdi_dir),
        timeout_s=60,
        what=f"no CDI spec of either driver left in {node.layout.cdi_dir}",
    )
    assert not _entries(vgpu_dir(node.layout) / "claims")
    assert not _entries(vgpu_dir(node.layout) / "limits")


def _claim_of(client: KubeClient, pod_name: str) -> Json:
    pod = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_name}")
    [status] = pod["status"]["resourceClaimStatuses"]
    path = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims/{status['resourceClaimName']}"
    claim: Json = client.get(path)
    return claim


def _assert_both_drivers_prepared(
    nvidia_node: NvidiaNode, claim: Json, *, mib: int, sm: str
) -> None:
    """NVIDIA's result on its card and ours on the enforcer, each driver's spec written, and our
    limits file keyed by NVIDIA's UUID."""
    node, uid = nvidia_node.node, claim["metadata"]["uid"]
    results = results_by_driver(claim)
    [gpu], [enforcer] = results[NVIDIA_DRIVER], results[ENFORCER_DRIVER]
    assert (gpu["pool"], gpu["device"]) == (node.name, CARD.device_name)
    assert (enforcer["pool"], enforcer["device"]) == (node.name, ENFORCER_DEVICE)
    assert spec_path(node.layout.cdi_dir, uid).is_file()
    assert (node.layout.cdi_dir / f"k8s.{ENFORCER_DRIVER}-claim_{uid}.json").is_file()
    limits = parse_limits((vgpu_dir(node.layout) / "limits" / f"{uid}.conf").read_text())
    assert limits[f"CUDA_DEVICE_MEMORY_LIMIT_{CARD.uuid}"] == f"{mib}m"
    assert limits[f"CUDA_DEVICE_SM_LIMIT_{CARD.uuid}"] == sm


def _entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
