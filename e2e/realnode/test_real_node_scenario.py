"""The scenario that proves the product on a real node (issue 10, items 2 and 3).

Pods ask for ``nvidia.com/gpumem``; our webhook translates them into ResourceClaimTemplates;
kube-scheduler allocates both claims on the one mock GPU our node agent publishes for the real
node; the real kubelet calls the agent's NodePrepareResources (registered through its plugin
registry); containerd applies the agent's CDI spec; inside each container a dynamic program over
the fake libcuda.so.1 runs with libvgpu.so preloaded through /etc/ld.so.preload and is refused
(CUDA_ERROR_OUT_OF_MEMORY) past its own share, while the other pod holds its own. Deleting the
pods unprepares the claims and removes the CDI specs.

Collected only with ``VGPU_REALNODE=1`` (``make e2e-realnode``); see conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.cluster import LocalCluster, Settings
from e2e.cluster.client import ApiError, Json, KubeClient
from e2e.dra_objects import device_class
from e2e.realnode.agent import CONTAINER_LIBVGPU, start_agent, vgpu_dir
from e2e.realnode.node import CUDA_IMAGE, RealNode
from e2e.realnode.spike import node_and_cluster, pod_log
from e2e.waiting import wait_for
from e2e.webhook.process import running_webhook
from vgpu_bridge.core import DEFAULT

pytestmark = pytest.mark.e2e

RESOURCE = "/apis/resource.k8s.io/v1"
LABEL = "e2e.vgpu-bridge.io/realnode-webhook"
GPU = {"uuid": "GPU-realnode-0000", "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"}
CHUNK_MIB = 50
#: the pods hold their allocations until deleted
HOLD_S = 600
CUDA_ERROR_OUT_OF_MEMORY = 2


@dataclass(frozen=True)
class Product:
    cluster: LocalCluster
    node: RealNode
    namespace: str

    @property
    def client(self) -> KubeClient:
        return self.cluster.client()


@pytest.fixture(scope="module")
def product(e2e_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Product]:
    log: list[str] = []
    try:
        with node_and_cluster(e2e_settings, log=log, with_native=True) as (cluster, node):
            assert node.native is not None
            client = cluster.client()
            client.create(
                f"{RESOURCE}/deviceclasses",
                device_class(DEFAULT.device_class, driver=DEFAULT.driver),
            )
            start_agent(node, cluster, node.native, [GPU])
            workdir = tmp_path_factory.mktemp("webhook")
            with running_webhook(
                client, cluster.kubeconfig, workdir, grace_s=3, namespace_label=LABEL
            ):
                namespace = "realnode"
                client.create(
                    "/api/v1/namespaces",
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": namespace, "labels": {LABEL: "true"}},
                    },
                )
                yield Product(cluster, node, namespace)
                for name in ("kubelet", "node-agent"):
                    print(f"--- {name} (tail) ---\n{node.component(name).log_tail(40)}")
    finally:
        print("\n".join(log))


def cuda_pod(name: str, node_name: str, gpumem_mib: int) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node_name},
            "hostNetwork": True,
            "dnsPolicy": "Default",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "cuda",
                    "image": CUDA_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": [str(CHUNK_MIB), str(HOLD_S)],
                    "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": gpumem_mib}},
                }
            ],
        },
    }


def parse(output: str) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values.setdefault(key, []).append(value)
    return values


def test_gpumem_pods_share_a_real_node_gpu_each_within_its_own_share(product: Product) -> None:
    client, node, ns = product.client, product.node, product.namespace
    shares = {"small": 1000, "large": 2000}
    for name, mib in shares.items():
        created = client.create(f"/api/v1/namespaces/{ns}/pods", cuda_pod(name, node.name, mib))
        # translated by our webhook: a claim instead of the extended resources
        limits = created["spec"]["containers"][0].get("resources", {}).get("limits", {})
        assert not any(key.startswith("nvidia.com/") for key in limits), limits
        assert created["spec"].get("resourceClaims"), created["spec"]

    def outputs() -> dict[str, str] | None:
        """Each pod's output once both have hit their limit and hold it (both Running)."""
        found = {}
        for name in shares:
            pod = client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            assert pod["status"].get("phase") in ("Pending", "Running"), pod["status"]
            output = pod_log(node, pod, "cuda")
            if pod["status"].get("phase") != "Running" or "alloc_error=" not in output:
                return None
            found[name] = output
        return found

    held = wait_for(outputs, timeout_s=180, what="both CUDA pods holding their shares")
    for name, mib in shares.items():
        values = parse(held[name])
        assert values["env.CUDA_DEVICE_MEMORY_LIMIT_0"] == [f"{mib}m"], held[name]
        assert values["preload"] == [CONTAINER_LIBVGPU], held[name]
        assert CONTAINER_LIBVGPU in values.get("mapped", []), held[name]
        assert values["init_error"] == ["0"], held[name]
        assert values["total_mib"] == [str(mib)], held[name]  # libvgpu virtualises cuMemGetInfo
        assert values["alloc_error"] == [str(CUDA_ERROR_OUT_OF_MEMORY)], held[name]
        allocated = int(values["allocated_mib"][0])
        assert mib - CHUNK_MIB < allocated <= mib, held[name]

    # both claims on the one mock GPU of the real node, each prepared (a CDI spec each)
    claims = client.items(f"{RESOURCE}/namespaces/{ns}/resourceclaims")
    assert len(claims) == 2
    devices = set()
    for claim in claims:
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        devices.add((result["driver"], result["pool"], result["device"]))
        spec = node.layout.cdi_dir / f"k8s.{DEFAULT.driver}-claim_{claim['metadata']['uid']}.json"
        assert spec.is_file(), sorted(p.name for p in node.layout.cdi_dir.iterdir())
    assert devices == {(DEFAULT.driver, node.name, "gpu-0")}

    claim_dirs = vgpu_dir(node.layout) / "claims"
    assert claim_dirs.is_dir()
    for name in shares:
        client.delete(f"/api/v1/namespaces/{ns}/pods/{name}")
    wait_for(
        lambda: all(_gone(client, f"/api/v1/namespaces/{ns}/pods/{name}") for name in shares),
        timeout_s=60,
        what="both pods deleted by the kubelet",
    )
    wait_for(
        lambda: not list(node.layout.cdi_dir.glob("*.json")),
        timeout_s=60,
        what="the CDI specs removed by NodeUnprepareResources",
    )
    wait_for(
        lambda: not client.items(f"{RESOURCE}/namespaces/{ns}/resourceclaims"),
        timeout_s=60,
        what="the claims deleted",
    )
    assert not _entries(claim_dirs)


def _gone(client: KubeClient, path: str) -> bool:
    try:
        client.get(path)
    except ApiError as error:
        return error.status == 404
    return False


def _entries(directory: Path) -> list[str]:
    """What is left in the agent's claims/ dir (Unprepare removes each claim's region dir)."""
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
