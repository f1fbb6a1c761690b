"""A real Prometheus scrapes the real node agent (mock GPU, on a node of its own) and the real
webhook while a shared-GPU workload runs: a HAMi-style pod (gpumem 3000, gpucores 30) goes
through the webhook, the real scheduler and the agent's gRPC, and a CUDA program under libvgpu
(fake driver) runs with the environment of the agent's CDI spec, holding 2900 MiB after one
refused allocation and launching kernels. Every alert expression of the chart's rule file (its
threshold made `bool`) and every dashboard query returns series; stopping the agent fires
VgpuBridgeAgentDown. The rules are loaded with every `for` shortened to 2 s (rules.py)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster, create_fake_node
from e2e.cluster.client import ApiError, Json
from e2e.node.agent import AgentProcess, GrpcPreparer, free_port, running_agent
from e2e.node.conftest import device_class_present
from e2e.pods import claim_of, running_pod
from e2e.prometheus.install import PrometheusTools
from e2e.prometheus.promql import with_bool_threshold
from e2e.prometheus.rules import alert_rules, dashboard, dashboard_queries, with_short_holds
from e2e.prometheus.server import PrometheusServer, config, running_prometheus
from e2e.prometheus.workload import build_workload, container_env, running_workload
from e2e.waiting import wait_for
from e2e.webhook.helpers import create_pod, gpu_pod
from e2e.webhook.process import running_webhook
from vgpu_bridge.core import DEFAULT

pytestmark = pytest.mark.e2e

RESOURCE = "/apis/resource.k8s.io/v1"
NODE_LABEL = "e2e.vgpu-bridge.io/prometheus-node"
NAMESPACE_LABEL = "e2e.vgpu-bridge.io/prometheus"
GPUS = [{"uuid": "GPU-prom-0000", "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"}]
SHARE = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}
ALLOCATIONS_MIB = [2000, 1500, 900]  # 2000 + 1500 passes the 3000 MiB share: refused
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY = 0, 2
SM_UTIL = 95  # what the fake NVML reports: above the share's 30%, so libvgpu throttles
MIB = 2**20


@dataclass
class Scene:
    node: str
    agent: AgentProcess
    prometheus: PrometheusServer
    namespace: str
    claim_uid: str


@contextmanager
def _own_node(kube: KubeClient) -> Iterator[str]:
    name = f"e2e-prom-{secrets.token_hex(3)}"
    create_fake_node(kube, name, labels={NODE_LABEL: "true"})
    try:
        yield name
    finally:
        kube.delete(f"/api/v1/nodes/{name}")
        selector = f"spec.nodeName={name},spec.driver={DEFAULT.driver}"
        for item in kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector):
            kube.delete(f"{RESOURCE}/resourceslices/{item['metadata']['name']}")


@contextmanager
def _webhook_namespace(kube: KubeClient) -> Iterator[str]:
    name = f"e2e-prometheus-{secrets.token_hex(3)}"
    meta = {"name": name, "labels": {NAMESPACE_LABEL: "true"}}
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    try:
        yield name
    finally:
        for pod in kube.items(f"/api/v1/namespaces/{name}/pods"):  # the stand-in unprepares
            kube.delete(
                f"/api/v1/namespaces/{name}/pods/{pod['metadata']['name']}", grace_period_s=0
            )
        kube.delete(f"/api/v1/namespaces/{name}")


def _shared_pod(kube: KubeClient, namespace: str) -> Json:
    """The share through the webhook, on our node; a denied pod beside it (gpucores 200)."""
    pod = gpu_pod("shared", SHARE)
    pod["spec"]["nodeSelector"] = {NODE_LABEL: "true"}
    create_pod(kube, namespace, pod)
    with pytest.raises(ApiError, match="gpucores"):
        create_pod(kube, namespace, gpu_pod("too-many-cores", {"nvidia.com/gpucores": 200}))
    return running_pod(kube, namespace, "shared")


@pytest.fixture(scope="module")
def scene(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    prometheus_tools: PrometheusTools,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Scene]:
    workdir = tmp_path_factory.mktemp("prometheus")
    with ExitStack() as stack:
        node = stack.enter_context(_own_node(kube))
        stack.enter_context(device_class_present(kube, DEFAULT.driver))
        agent = stack.enter_context(running_agent(node, e2e_cluster.kubeconfig, GPUS))
        preparer = GrpcPreparer(agent.dra_socket)
        stack.callback(preparer.close)
        stack.enter_context(KubeletStandIn(kube, [node], preparer=preparer))
        webhook_metrics = f"127.0.0.1:{free_port()}"
        metrics_flag = ["--metrics-listen", webhook_metrics]
        stack.enter_context(
            running_webhook(kube, e2e_cluster.kubeconfig, workdir / "webhook", grace_s=None,
                            namespace_label=NAMESPACE_LABEL, extra_args=metrics_flag)
        )  # fmt: skip
        namespace = stack.enter_context(_webhook_namespace(kube))
        uid = claim_of(kube, namespace, _shared_pod(kube, namespace))["metadata"]["uid"]
        codes = stack.enter_context(
            running_workload(
                build_workload(workdir), container_env(agent.layout, uid),
                allocations_mib=ALLOCATIONS_MIB, sm_util=SM_UTIL,
            )
        )  # fmt: skip
        assert codes == [CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS]
        rules = with_short_holds(workdir / "alerts.yaml", hold="2s")
        targets = config(agents={f"127.0.0.1:{agent.metrics_port}": node},
                         webhooks=[webhook_metrics], rule_files=[rules])  # fmt: skip
        prometheus = stack.enter_context(
            running_prometheus(prometheus_tools.prometheus, workdir / "server", targets)
        )
        yield Scene(node, agent, prometheus, namespace, uid)
        print(prometheus.log()[-3000:])  # shown by pytest for failed tests


def _series(prometheus: PrometheusServer, expr: str) -> list[Json] | None:
    """The series `expr` returns now, waiting (for a rate's second sample) until there are some."""
    try:
        return wait_for(lambda: prometheus.query(expr) or None, timeout_s=45, what=expr)
    except AssertionError:
        return None


def _value(prometheus: PrometheusServer, expr: str) -> float:
    [sample] = wait_for(lambda: prometheus.query(expr) or None, timeout_s=45, what=expr)
    return float(sample["value"][1])


def test_the_share_is_seen_booked_used_refused_and_measured(scene: Scene) -> None:
    claim = f'{{job="vgpu-bridge-agent", claim_uid="{scene.claim_uid}"}}'
    assert _value(scene.prometheus, f"vgpu_bridge_claim_memory_limit_bytes{claim}") == 3000 * MIB
    wait_for(
        lambda: (
            _value(scene.prometheus, f"vgpu_bridge_claim_memory_used_bytes{claim}") == 2900 * MIB
        ),
        timeout_s=45,
        what="the workload's 2900 MiB in the agent's metrics",
    )
    assert _value(scene.prometheus, f"vgpu_bridge_claim_allocations_refused_total{claim}") == 1
    assert _value(scene.prometheus, f"max(vgpu_bridge_claim_cores_limit_percent{claim})") == 30
    wait_for(
        lambda: (
            _value(scene.prometheus, f"vgpu_bridge_claim_sm_utilisation_percent{claim}") == SM_UTIL
        ),
        timeout_s=45,
        what="libvgpu's measured SM utilisation in the agent's metrics",
    )


def test_every_alert_expression_returns_series_for_the_running_share(scene: Scene) -> None:
    empty = [
        rule["alert"]
        for rule in alert_rules()
        if not _series(scene.prometheus, with_bool_threshold(rule["expr"]))
    ]
    assert not empty, f"alert expressions without series: {empty}"


def _as_grafana_would(expr: str, *, node: str) -> str:
    """The query with the dashboard's variables filled in: the node, and a rate window of a few
    scrape intervals (Grafana's $__rate_interval is at least four)."""
    expr = re.sub(r"\$\{?node\}?", node, expr)  # a DNS name: a regex that matches itself
    return re.sub(r"\$\{?__rate_interval\}?", "30s", expr)


def test_every_dashboard_query_returns_series_for_the_running_share(scene: Scene) -> None:
    queries = dashboard_queries(dashboard())
    empty = [
        f"{title}: {expr}"
        for title, expr in queries
        if not _series(scene.prometheus, _as_grafana_would(expr, node=scene.node))
    ]
    assert not empty, "dashboard queries without series:\n" + "\n".join(empty)


def test_stopping_the_agent_fires_agent_down_for_its_node(scene: Scene) -> None:
    assert scene.prometheus.firing("VgpuBridgeAgentDown") == []
    scene.agent.stop()
    try:
        [alert] = wait_for(
            lambda: scene.prometheus.firing("VgpuBridgeAgentDown") or None,
            timeout_s=60,
            what="VgpuBridgeAgentDown to fire",
        )
    finally:
        scene.agent.start()  # the stand-in unprepares the pod through it at teardown
    assert alert["labels"]["node"] == scene.node
    assert alert["labels"]["severity"] == "critical"
    assert scene.node in alert["annotations"]["summary"]
