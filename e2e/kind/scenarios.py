"""The example scenarios on kind (``make e2e-kind``; run only against kind's kubeconfig, so this
file is not named test_*): the same manifests as the docs and the demo, a real kubelet and
containerd, the CDI spec's limits seen from inside the container."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from e2e.cluster.settings import REPO_ROOT, Settings
from e2e.kind.cluster import MOCK_GPU_LABEL, Kind
from vgpu_bridge.kube import KubeApi, KubeError

pytestmark = pytest.mark.e2e
Json = dict[str, Any]
EXAMPLES = REPO_ROOT / "examples"


@pytest.fixture(scope="session")
def kind() -> Kind:
    return Kind.from_settings(Settings.from_env())


@pytest.fixture(scope="session")
def api(kind: Kind) -> KubeApi:
    return KubeApi.connect(str(kind.kubeconfig), timeout_s=30)


@pytest.fixture
def namespace(api: KubeApi) -> Iterator[str]:
    name = f"kind-{secrets.token_hex(3)}"
    api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    api.delete(f"/api/v1/namespaces/{name}")


def pod_log(kind: Kind, namespace: str, name: str) -> str:
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kind.kubeconfig), client_configuration=configuration
    )
    core = client.CoreV1Api(client.ApiClient(configuration))
    text: str = core.read_namespaced_pod_log(name, namespace)
    return text


def wait_running(api: KubeApi, namespace: str, name: str, timeout_s: float = 180) -> Json:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pod = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if pod.get("status", {}).get("phase") == "Running":
            return pod
        time.sleep(2)
    raise AssertionError(f"pod {name} not Running after {timeout_s:.0f}s: {pod.get('status')}")


def example(path: str) -> Json:
    doc: Json = yaml.safe_load((EXAMPLES / path).read_text())
    return doc


def test_share_pod_runs_with_the_limits_in_its_environment(
    kind: Kind, api: KubeApi, namespace: str
) -> None:
    pod = example("plain/pod-share.yaml")
    api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    wait_running(api, namespace, pod["metadata"]["name"])
    time.sleep(3)  # the container prints its environment first
    log = pod_log(kind, namespace, pod["metadata"]["name"])
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=3000m" in log
    assert "CUDA_DEVICE_SM_LIMIT_0=30" in log


def test_each_mock_gpu_worker_publishes_its_gpus_through_the_agent(api: KubeApi) -> None:
    nodes = api.list("/api/v1/nodes", labelSelector=MOCK_GPU_LABEL)["items"]
    assert nodes
    slices = api.list(
        "/apis/resource.k8s.io/v1/resourceslices", fieldSelector="spec.driver=gpu.vgpu-bridge.io"
    )["items"]
    published = {s["spec"]["nodeName"]: len(s["spec"].get("devices") or []) for s in slices}
    assert published == {n["metadata"]["name"]: 2 for n in nodes}


def test_deployment_replicas_see_a_quarter_of_an_80gi_card(
    kind: Kind, api: KubeApi, namespace: str
) -> None:
    deployment = example("plain/deployment-percentage.yaml")
    api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = api.list(f"/api/v1/namespaces/{namespace}/pods")["items"]
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        if len(running) == 2:
            break
        time.sleep(2)
    else:
        raise AssertionError(f"replicas not Running: {[p.get('status') for p in pods]}")
    time.sleep(3)
    for pod in running:
        log = pod_log(kind, namespace, pod["metadata"]["name"])
        assert "CUDA_DEVICE_MEMORY_LIMIT_0=20480m" in log
        assert "CUDA_DEVICE_SM_LIMIT_0=25" in log


def test_mig_mode_is_refused_at_admission(api: KubeApi, namespace: str) -> None:
    pod = example("plain/pod-share.yaml")
    pod["metadata"]["annotations"] = {"nvidia.com/vgpu-mode": "mig"}
    with pytest.raises(KubeError) as refused:
        api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    assert "mig" in str(refused.value).lower()
