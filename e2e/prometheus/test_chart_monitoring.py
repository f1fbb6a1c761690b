"""The chart's monitoring objects under `helm template`: off by default; when on, the
ServiceMonitor and PodMonitors find the agent and webhook pods on a port they expose and give them
the job names (and the agents a `node`) the rules select on; the PrometheusRule holds exactly the
rule file promtool tests, and the dashboard ConfigMap exactly the dashboard JSON, labelled for
Grafana's sidecar; `metrics.hamiCompatible` gives the agents their `--hami-metrics` setting and
`get` on pods, nothing of either by default. The API server of the local cluster, given
prometheus-operator's CRDs, accepts every rendered monitoring object under strict field
validation. Values the chart cannot honour fail naming the field."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.chart.rendering import Helm, of_kind, one
from e2e.cluster import KubeClient, Settings
from e2e.cluster.client import ApiError
from e2e.prometheus.operator_crds import API as OPERATOR_API
from e2e.prometheus.operator_crds import PROMETHEUS_OPERATOR
from e2e.prometheus.rules import ALERTS_FILE, DASHBOARD_FILE
from e2e.prometheus.server import AGENT_JOB, WEBHOOK_JOB
from e2e.upstream_crds import installed, kept, strict_dry_run
from vgpu_bridge.node.settings import Settings as NodeSettings

pytestmark = pytest.mark.e2e

Json = dict[str, Any]
MONITOR_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
EVERYTHING: Json = {
    "webhook": {"metrics": {"enabled": True}},
    "monitoring": {
        "labels": {"release": "kube-prometheus-stack"},
        "interval": "15s",
        "serviceMonitor": {"enabled": True},
        "podMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "GPU"}},
    },
}
PODS_ONLY: Json = {
    "webhook": {"metrics": {"enabled": True}},
    "monitoring": {"podMonitor": {"enabled": True}},
}


def _named(objects: list[Json], kind: str, suffix: str) -> Json:
    [found] = [o for o in of_kind(objects, kind) if o["metadata"]["name"].endswith(suffix)]
    return found


def _pod_template(objects: list[Json], kind: str) -> Json:
    template: Json = one(objects, kind)["spec"]["template"]
    return template


def _port_names(pod_template: Json) -> set[str]:
    containers = pod_template["spec"]["containers"]
    return {port["name"] for c in containers for port in c.get("ports", [])}


def _job_and_node(endpoint: Json) -> tuple[str, bool]:
    relabel = endpoint["relabelings"]
    [job] = [r["replacement"] for r in relabel if r["targetLabel"] == "job"]
    node = {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in relabel
    return job, node


def test_nothing_of_monitoring_is_rendered_by_default(helm: Helm) -> None:
    objects = helm.template()
    assert [o["kind"] for o in objects if o["kind"] in MONITOR_KINDS] == []
    assert not [
        o
        for o in of_kind(objects, "ConfigMap")
        if "grafana_dashboard" in o["metadata"].get("labels", {})
    ]


def test_the_service_monitor_scrapes_the_agents_metrics_service_as_the_agent_job(
    helm: Helm,
) -> None:
    objects = helm.template(EVERYTHING)
    monitor = one(objects, "ServiceMonitor")
    service = _named(objects, "Service", "-agent-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert (endpoint["interval"], endpoint["honorLabels"]) == ("15s", True)
    assert _job_and_node(endpoint) == (AGENT_JOB, True)
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["vgpu-bridge"]}


def test_with_the_service_monitor_the_pod_monitor_scrapes_only_the_webhook(helm: Helm) -> None:
    objects = helm.template(EVERYTHING)
    [monitor] = of_kind(objects, "PodMonitor")
    pods = _pod_template(objects, "Deployment")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pods["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in _port_names(pods)
    assert _job_and_node(endpoint) == (WEBHOOK_JOB, False)


def test_pod_monitors_alone_scrape_the_agents_too(helm: Helm) -> None:
    objects = helm.template(PODS_ONLY)
    assert of_kind(objects, "ServiceMonitor") == []
    monitor = _named(objects, "PodMonitor", "-agent")
    pods = _pod_template(objects, "DaemonSet")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pods["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in _port_names(pods)
    assert endpoint["honorLabels"] is True
    assert _job_and_node(endpoint) == (AGENT_JOB, True)


def _agent_env_and_pod_rules(objects: list[Json]) -> tuple[dict[str, str], list[Json]]:
    [agent] = [c for c in one(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
               if c["name"] == "agent"]  # fmt: skip
    role = _named(objects, "ClusterRole", "-agent")
    pods = [r for r in role["rules"] if "pods" in r["resources"]]
    return {e["name"]: e.get("value", "") for e in agent["env"]}, pods


def test_hami_compatible_metrics_turn_on_the_agents_setting_and_read_no_pod(
    helm: Helm,
) -> None:
    environ, pod_rules = _agent_env_and_pod_rules(helm.template())
    assert "VGPU_BRIDGE_HAMI_METRICS" not in environ
    assert pod_rules == []  # off by default: the agent reads no pod
    objects = helm.template({"metrics": {"hamiCompatible": True}})
    environ, pod_rules = _agent_env_and_pod_rules(objects)
    settings = NodeSettings.from_env(
        {k: v for k, v in environ.items() if k.startswith("VGPU_BRIDGE_") and v}
        | {"VGPU_BRIDGE_NODE_NAME": "node-a"}
    )
    assert settings.hami_metrics is True
    # names come from the claims' reservedFor and the kubelet's node-local pod-resources socket
    assert settings.pod_resources_socket is not None
    assert pod_rules == []


def test_the_prometheus_rule_holds_exactly_the_rule_file_promtool_tests(helm: Helm) -> None:
    rule = one(helm.template(EVERYTHING), "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml.safe_load(ALERTS_FILE.read_text())
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_dashboard_config_map_holds_the_dashboard_for_grafanas_sidecar(helm: Helm) -> None:
    values = {
        **EVERYTHING,
        "monitoring": {"grafanaDashboard": {"enabled": True, "namespace": "grafana"}},
    }
    [board] = [
        o
        for o in of_kind(helm.template(values), "ConfigMap")
        if o["metadata"]["name"].endswith("-dashboard")
    ]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["metadata"]["namespace"] == "grafana"
    [(name, text)] = board["data"].items()
    assert name.endswith(".json")
    assert json.loads(text) == json.loads(DASHBOARD_FILE.read_text())


def test_helm_lint_strict_passes_with_everything_on(helm: Helm) -> None:
    assert "1 chart(s) linted, 0 chart(s) failed" in helm.lint(EVERYTHING)


REFUSALS = [
    (
        "pod-monitor-without-webhook-metrics",
        {"monitoring": {"podMonitor": {"enabled": True}}},
        "set webhook.metrics.enabled=true",
    ),
    (
        "service-monitor-without-the-service",
        {
            "monitoring": {"serviceMonitor": {"enabled": True}},
            "metrics": {"service": {"enabled": False}},
        },
        "set metrics.service.enabled=true",
    ),
    ("interval-not-a-duration", {"monitoring": {"interval": "often"}}, "interval"),
    ("misspelt-toggle", {"monitoring": {"prometheusRule": {"enable": True}}}, "enable"),
    (
        "label-not-a-string",
        {"monitoring": {"grafanaDashboard": {"labels": {"grafana_dashboard": 1}}}},
        "grafana_dashboard",
    ),
]


@pytest.mark.parametrize(
    ("values", "says"), [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS]
)
def test_values_the_chart_cannot_honour_fail_naming_the_field(
    helm: Helm, values: Json, says: str
) -> None:
    assert says in helm.template_error(values)


@pytest.fixture(scope="module")
def operator_kinds(kube: KubeClient, e2e_settings: Settings) -> Iterator[dict[str, str]]:
    """prometheus-operator's CRDs on the local cluster while these tests run; kind -> plural."""
    with installed(kube, PROMETHEUS_OPERATOR.crds(e2e_settings)) as kinds:
        yield kinds


def _dry_run_create(kube: KubeClient, obj: Json, plural: str) -> Json:
    return strict_dry_run(kube, obj, OPERATOR_API, plural, obj["metadata"]["namespace"])


def test_the_api_server_accepts_every_monitoring_object_under_the_operators_schemas(
    helm: Helm, kube: KubeClient, namespace: str, operator_kinds: dict[str, str]
) -> None:
    objects = helm.template(EVERYTHING, namespace=namespace)
    objects += of_kind(helm.template(PODS_ONLY, namespace=namespace), "PodMonitor")
    monitors = [o for o in objects if o["kind"] in MONITOR_KINDS]
    assert sorted({o["kind"] for o in monitors}) == sorted(MONITOR_KINDS)
    for obj in monitors:
        accepted = _dry_run_create(kube, obj, operator_kinds[obj["kind"]])
        assert kept(obj["spec"], accepted["spec"]), obj["metadata"]["name"]  # nothing pruned
    misspelt = copy.deepcopy(one(objects, "ServiceMonitor"))
    misspelt["spec"]["endpoints"][0]["honourLabels"] = True
    with pytest.raises(ApiError, match="honourLabels"):
        _dry_run_create(kube, misspelt, operator_kinds["ServiceMonitor"])
