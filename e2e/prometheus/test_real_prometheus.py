"""A real Prometheus scrapes the real node agent (mock GPU, on a node of its own) and the real
webhook while a shared-GPU workload runs: a HAMi-style pod (gpumem 3000, gpucores 30) goes
through the webhook, the real scheduler and the agent's gRPC, and a CUDA program under libvgpu
(fake driver) runs with the environment of the agent's CDI spec, holding 2900 MiB after one
refused allocation and launching kernels. Every alert expression of the chart's rule file (its
threshold made `bool`) and every dashboard query returns series, the absence alerts' none;
stopping the agent fires VgpuBridgeAgentDown and VgpuBridgeAgentAbsent. The rules are loaded with
every `for` shortened to 2 s (rules.py). The agent also serves HAMi's series
(`--hami-metrics`): queries of HAMi's own dashboard return the share's pod, container and values."""

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
from e2e.prometheus.rules import (
    alert_rules,
    dashboard,
    dashboard_queries,
    is_absence_alert,
    with_short_holds,
)
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
# The mock card has the fake driver's device 0 UUID, as NVML and CUDA name a real card alike:
# the HAMi series join the share's device (NVML's UUID) with the region's use (CUDA's).
FAKE_DRIVER_DEVICE_0 = "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae00"
GPUS = [{"uuid": FAKE_DRIVER_DEVICE_0, "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"}]
SHARE = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}
ALLOCATIONS_MIB = [2000, 1500, 900]  # 2000 + 1500 passes the 3000 MiB share: refused
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY = 0, 2
SM_UTIL = 95  # what the fake NVML reports: above the share's 30%, so libvgpu throttles
MIB = 2**20
JOBS = ("vgpu-bridge-agent", "vgpu-bridge-webhook")


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
        agent = stack.enter_context(
            running_agent(node, e2e_cluster.kubeconfig, GPUS,
                          extra_env={"VGPU_BRIDGE_HAMI_METRICS": "true"})
        )  # fmt: skip
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
    assert _value(scene.prometheus, f"max(vgpu_bridge_claim_cores_limit_ratio{claim})") == 0.3
    wait_for(
        lambda: (
            _value(scene.prometheus, f"vgpu_bridge_claim_sm_utilization_ratio{claim}")
            == SM_UTIL / 100
        ),
        timeout_s=45,
        what="libvgpu's measured SM utilization in the agent's metrics",
    )


def test_every_alert_expression_returns_series_for_the_running_share(scene: Scene) -> None:
    empty = [
        rule["alert"]
        for rule in alert_rules()
        if not is_absence_alert(rule)
        and not _series(scene.prometheus, with_bool_threshold(rule["expr"]))
    ]
    assert not empty, f"alert expressions without series: {empty}"


def test_the_absence_alerts_return_nothing_while_both_jobs_are_scraped(scene: Scene) -> None:
    absences = [rule for rule in alert_rules() if is_absence_alert(rule)]
    assert len(absences) == 2
    wait_for(
        lambda: all(scene.prometheus.query(f'up{{job="{job}"}} == 1') for job in JOBS),
        timeout_s=45,
        what="both jobs scraped",
    )
    assert {rule["alert"]: scene.prometheus.query(rule["expr"]) for rule in absences} == {
        rule["alert"]: [] for rule in absences
    }


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


# Queries of HAMi's own Grafana dashboard, as its panels and variables write them (Project-HAMi/HAMi
# dashboards/hami-vgpu-dashboard.json: "vGPU memory: used vs limit", "vGPU memory used % of limit",
# "Container device utilization", the "Allocated GPU memory" and "Physical GPUs" stats, and the
# node variable's label_values query).
HAMI_USED = 'hami_vgpu_memory_used_bytes{namespace=~"$namespace"}'
HAMI_LIMIT = 'hami_vgpu_memory_limit_bytes{namespace=~"$namespace"}'
HAMI_USED_PERCENT = (
    '100 * hami_vgpu_memory_used_bytes{namespace=~"$namespace"} / '
    'hami_vgpu_memory_limit_bytes{namespace=~"$namespace"}'
)
HAMI_UTILIZATION = 'hami_container_device_utilization_ratio{namespace=~"$namespace"}'
HAMI_ALLOCATED = 'sum(hami_gpu_memory_allocated_bytes{node=~"$node"})'
HAMI_CARDS = 'count(hami_gpu_memory_limit_bytes{node=~"$node"})'
HAMI_NODES = "hami_gpu_memory_limit_bytes"  # label_values(hami_gpu_memory_limit_bytes, node)


def _as_hami_dashboard_would(expr: str, scene: Scene) -> str:
    return expr.replace("$namespace", scene.namespace).replace("$node", scene.node)


def test_hami_dashboard_queries_return_the_shares_pod_container_and_values(scene: Scene) -> None:
    def query(expr: str) -> list[Json]:
        return wait_for(
            lambda: scene.prometheus.query(_as_hami_dashboard_would(expr, scene)) or None,
            timeout_s=60,
            what=f"HAMi's query {expr}",
        )

    wait_for(
        lambda: [float(s["value"][1]) for s in query(HAMI_USED)] == [2900 * MIB],
        timeout_s=60,
        what="the workload's 2900 MiB in hami_vgpu_memory_used_bytes",
    )
    [used] = query(HAMI_USED)
    labels = {k: v for k, v in used["metric"].items() if k not in ("instance", "job")}
    assert labels == {
        "__name__": "hami_vgpu_memory_used_bytes",
        "namespace": scene.namespace,
        "pod": "shared",
        "container": "main",
        "vdevice_index": "0",
        "device_uuid": GPUS[0]["uuid"],
        "zone": "vGPU",
        "node": scene.node,
    }
    assert [float(s["value"][1]) for s in query(HAMI_LIMIT)] == [3000 * MIB]
    assert [float(s["value"][1]) for s in query(HAMI_USED_PERCENT)] == [
        pytest.approx(100 * 2900 / 3000)
    ]
    assert [float(s["value"][1]) for s in query(HAMI_UTILIZATION)] == [SM_UTIL]
    assert [float(s["value"][1]) for s in query(HAMI_ALLOCATED)] == [3000 * MIB]
    assert [float(s["value"][1]) for s in query(HAMI_CARDS)] == [1]
    nodes = scene.prometheus.api("label/node/values", **{"match[]": HAMI_NODES})
    assert scene.node in nodes


def test_stopping_the_agent_fires_agent_down_for_its_node_and_agent_absent(scene: Scene) -> None:
    assert scene.prometheus.firing("VgpuBridgeAgentDown") == []
    scene.agent.stop()
    try:
        [alert] = wait_for(
            lambda: scene.prometheus.firing("VgpuBridgeAgentDown") or None,
            timeout_s=60,
            what="VgpuBridgeAgentDown to fire",
        )
        absent = wait_for(
            lambda: scene.prometheus.firing("VgpuBridgeAgentAbsent") or None,
            timeout_s=60,
            what="VgpuBridgeAgentAbsent to fire: no agent target is up",
        )
    finally:
        scene.agent.start()  # the stand-in unprepares the pod through it at teardown
    assert alert["labels"]["node"] == scene.node
    assert alert["labels"]["severity"] == "critical"
    assert scene.node in alert["annotations"]["summary"]
    assert [a["labels"]["severity"] for a in absent] == ["warning"]
    assert absent[0]["annotations"]["runbook_url"].endswith("#vgpubridgeagentabsent")
