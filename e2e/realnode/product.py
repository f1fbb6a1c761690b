"""Our product on the real node, as the tests that use it through pods see it (issue 10).

``running_product`` brings up a private control plane and the real node with libvgpu, the CUDA
image (which holds no driver library) and the stand-in driver install (driver_root.py), our
DeviceClass, our node agent publishing one mock GPU of the stand-in's driver version with
``--driver-root`` at that install (so each claim's CDI spec mounts the driver's libraries and
nvidia-smi), and our webhook translating the pods of one labelled namespace; everything is torn
down however the block ends. The ``product`` fixture (conftest.py) gives each test module its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster import LocalCluster, Settings
from e2e.cluster.client import ApiError, KubeClient
from e2e.dra_objects import device_class
from e2e.realnode.agent import start_agent
from e2e.realnode.driver_root import DRIVER_VERSION, DriverRootFlags
from e2e.realnode.node import RealNode
from e2e.realnode.spike import node_and_cluster
from e2e.waiting import wait_for
from e2e.webhook.process import running_webhook
from vgpu_bridge.core import DEFAULT

RESOURCE = "/apis/resource.k8s.io/v1"
LABEL = "e2e.vgpu-bridge.io/realnode-webhook"
NAMESPACE = "realnode"
# A UUID as NVML writes them: the fake libcuda in the pod reports the GPU NVIDIA_VISIBLE_DEVICES
# names, and libvgpu finds the limits the agent keyed by this UUID (or refuses the GPU).
GPU = {
    "uuid": "GPU-e2e00000-4ea1-4000-8000-000000000000",
    "productName": "NVIDIA H100 80GB HBM3",
    "memory": "80Gi",
    "driverVersion": DRIVER_VERSION,
}


@dataclass(frozen=True)
class Product:
    cluster: LocalCluster
    node: RealNode
    namespace: str
    #: the node agent's /metrics
    agent_metrics_url: str

    @property
    def client(self) -> KubeClient:
        return self.cluster.client()


@contextmanager
def running_product(settings: Settings, workdir: Path, *, log: list[str]) -> Iterator[Product]:
    """The cluster, the node, the agent with ``GPU`` and the webhook for ``NAMESPACE``."""
    with node_and_cluster(settings, log=log, with_native=True) as (cluster, node):
        assert node.native is not None
        assert node.driver_root is not None
        client = cluster.client()
        client.create(
            f"{RESOURCE}/deviceclasses", device_class(DEFAULT.device_class, driver=DEFAULT.driver)
        )
        _, metrics_url = start_agent(
            node, cluster, node.native, [GPU], driver_root=DriverRootFlags(node.driver_root)
        )
        with running_webhook(client, cluster.kubeconfig, workdir, grace_s=3, namespace_label=LABEL):
            client.create(
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": NAMESPACE, "labels": {LABEL: "true"}},
                },
            )
            yield Product(cluster, node, NAMESPACE, metrics_url)
            for name in ("kubelet", "node-agent"):
                print(f"--- {name} (tail) ---\n{node.component(name).log_tail(40)}")


def parse(output: str) -> dict[str, list[str]]:
    """A program's ``key=value`` lines: every value of each key, in order."""
    values: dict[str, list[str]] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values.setdefault(key, []).append(value)
    return values


def gone(client: KubeClient, path: str) -> bool:
    try:
        client.get(path)
    except ApiError as error:
        return error.status == 404
    return False


def delete_and_unprepare(product: Product, names: Iterable[str]) -> None:
    """Delete the pods; wait until the kubelet has removed them and NodeUnprepareResources has
    removed every CDI spec of the node."""
    client, pods = product.client, f"/api/v1/namespaces/{product.namespace}/pods"
    names = list(names)
    for name in names:
        client.delete(f"{pods}/{name}")
    wait_for(
        lambda: all(gone(client, f"{pods}/{name}") for name in names),
        timeout_s=60,
        what="the pods deleted by the kubelet",
    )
    wait_for(
        lambda: not list(product.node.layout.cdi_dir.glob("*.json")),
        timeout_s=60,
        what="the CDI specs removed by NodeUnprepareResources",
    )
