"""The chart's defaults on a mixed, tainted pool (``make e2e-kind`` collects this file after
``scenarios.py``; run only against kind's kubeconfig). kind-config.yaml makes the pool platform
teams run: two GPU workers labelled nvidia.com/gpu.present=true, the second tainted
nvidia.com/gpu=present:NoSchedule, one CPU-only worker, and an API server with the
ExtendedResourceToleration admission plugin. The chart is installed into a namespace labelled
for Pod Security (`cluster.install`). Shown here:

- the agent runs on both GPU workers, the tainted one too, and not on the CPU worker;
- a translated Deployment's pods tolerate the GPU taint and run on the tainted worker, with the
  webhook translating pods (the default) and with it translating the Deployment's template;
- the chart's namespace enforces `privileged` (the agent needs it), and the webhook's pod passes
  `restricted` while the agent's is refused there.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.kind.cluster import GPU_TAINT, NAMESPACE, NAMESPACE_LABELS, Kind, install
from e2e.kind.scenarios import (  # the fixtures and helpers of the kind scenarios
    agent_pods,
    api,
    create,
    delete_pods,
    kind,
    namespace,
    share_pod,
    workers,
)
from e2e.waiting import wait_for
from vgpu_bridge.kube import KubeApi, KubeError

pytestmark = pytest.mark.e2e
__all__ = ["api", "kind", "namespace", "workers"]  # fixtures, used by name
Json = dict[str, Any]
GPU_TOLERATION = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module", autouse=True)
def chart(kind: Kind) -> None:
    """The chart installed (``scenarios.py`` ends by uninstalling it): helm upgrade --install."""
    install(kind)


def cpu_workers(api: KubeApi, gpu_workers: list[str]) -> list[str]:
    nodes = api.list("/api/v1/nodes")["items"]
    return [
        n["metadata"]["name"]
        for n in nodes
        if "node-role.kubernetes.io/control-plane" not in n["metadata"].get("labels", {})
        and n["metadata"]["name"] not in gpu_workers
    ]


def test_the_agent_runs_on_the_gpu_workers_the_tainted_one_too_and_not_on_the_cpu_worker(
    api: KubeApi, workers: list[str]
) -> None:
    (cpu_worker,) = cpu_workers(api, workers)
    taints = api.get(f"/api/v1/nodes/{workers[1]}")["spec"].get("taints") or []
    assert [{k: t[k] for k in ("key", "value", "effect")} for t in taints] == [GPU_TAINT]
    placed = sorted(p["spec"]["nodeName"] for p in agent_pods(api))
    assert placed == workers
    assert cpu_worker not in placed
    daemonset = api.list(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets")["items"]
    (status,) = [d["status"] for d in daemonset if d["metadata"]["name"].endswith("-agent")]
    assert status["desiredNumberScheduled"] == 2  # the CPU worker is not even a candidate


def test_the_api_server_gives_a_pod_asking_for_nvidia_gpu_the_taints_toleration(
    api: KubeApi, namespace: str
) -> None:
    created = create(api, namespace, share_pod("asks-for-gpu"))
    assert GPU_TOLERATION in created["spec"]["tolerations"]  # ExtendedResourceToleration ran
    assert created["spec"].get("resourceClaims")  # and then the webhook translated it


def gpu_deployment(name: str, node: str) -> Json:
    pod = share_pod(name, node=node)
    pod["spec"]["restartPolicy"] = "Always"  # the only policy a Deployment takes
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def deployment_pods_running(api: KubeApi, namespace: str, name: str, node: str) -> list[Json]:
    def running() -> list[Json] | None:
        pods = api.list(f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"app={name}")
        items: list[Json] = pods["items"]
        done = [p for p in items if p.get("status", {}).get("phase") == "Running"]
        return done if len(done) == 2 else None

    pods = wait_for(running, timeout_s=240, what=f"both pods of {name} Running", interval_s=1)
    for found in pods:
        assert found["spec"]["nodeName"] == node
        assert GPU_TOLERATION in found["spec"]["tolerations"]
        assert found["spec"]["resourceClaims"]  # a translated share, not the extended resource
        limits = found["spec"]["containers"][0]["resources"].get("limits") or {}
        assert "nvidia.com/gpu" not in limits
    return pods


def test_a_translated_deployments_pods_run_on_the_tainted_gpu_worker(
    api: KubeApi, namespace: str, workers: list[str]
) -> None:
    """Pod-level translation (the chart's default): the plugin adds the toleration to each pod
    before the webhook removes nvidia.com/gpu from it."""
    tainted = workers[1]
    api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", gpu_deployment("pl", tainted))
    deployment_pods_running(api, namespace, "pl", tainted)


@pytest.fixture
def workload_level(kind: Kind) -> Iterator[None]:
    install(kind, "--set", "webhook.workloads=true")
    yield
    install(kind)


def test_with_workload_level_translation_the_template_keeps_the_toleration_the_plugin_would_add(
    api: KubeApi, namespace: str, workers: list[str], workload_level: None
) -> None:
    """The webhook removes nvidia.com/gpu from the Deployment's template, so the plugin never
    sees it on the pods: the template must carry the toleration itself."""
    tainted = workers[1]
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    stored = api.create(path, gpu_deployment("wl", tainted))
    template = stored["spec"]["template"]["spec"]
    assert template.get("resourceClaims"), "the Deployment's template was not translated"
    assert GPU_TOLERATION in template["tolerations"]
    deployment_pods_running(api, namespace, "wl", tainted)
    delete_pods(api, namespace)


@pytest.fixture
def restricted_namespace(api: KubeApi) -> Iterator[str]:
    name = f"restricted-{secrets.token_hex(3)}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": name, "labels": labels}})  # fmt: skip
    yield name
    api.delete(f"/api/v1/namespaces/{name}")


def template_spec(api: KubeApi, resource: str, suffix: str) -> Json:
    items = api.list(f"/apis/apps/v1/namespaces/{NAMESPACE}/{resource}")["items"]
    (found,) = [i for i in items if i["metadata"]["name"].endswith(suffix)]
    spec: Json = found["spec"]["template"]["spec"]
    spec.pop("serviceAccountName", None)
    spec.pop("serviceAccount", None)
    return spec


def dry_run_pod(api: KubeApi, namespace: str, spec: Json) -> Json:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "psa-check"}, "spec": spec}
    created: Json = api.create(f"/api/v1/namespaces/{namespace}/pods", body, dryRun="All")
    return created


def test_the_chart_namespace_enforces_privileged_and_the_webhook_pod_passes_restricted(
    api: KubeApi, restricted_namespace: str
) -> None:
    labels = api.get(f"/api/v1/namespaces/{NAMESPACE}")["metadata"]["labels"]
    assert {k: labels.get(k) for k in NAMESPACE_LABELS} == NAMESPACE_LABELS
    webhook = template_spec(api, "deployments", "-webhook")
    assert dry_run_pod(api, restricted_namespace, webhook)["spec"]["containers"]
    agent = template_spec(api, "daemonsets", "-agent")
    with pytest.raises(KubeError, match="violates PodSecurity"):
        dry_run_pod(api, restricted_namespace, agent)


def test_a_pod_pinned_to_the_tainted_worker_without_the_toleration_is_not_scheduled(
    api: KubeApi, namespace: str, workers: list[str]
) -> None:
    """The taint is real: a pod without GPUs pinned there gets no toleration and stays
    Unschedulable, so the runs above are the tolerations' doing."""
    pod = share_pod("untolerated", node=workers[1])
    pod["spec"]["containers"][0].pop("resources")
    created = create(api, namespace, pod)
    assert GPU_TOLERATION not in (created["spec"].get("tolerations") or [])

    def unschedulable() -> Json | None:
        status = api.get(f"/api/v1/namespaces/{namespace}/pods/untolerated")["status"]
        found = [c for c in status.get("conditions") or [] if c["type"] == "PodScheduled"]
        return found[0] if found and found[0].get("reason") == "Unschedulable" else None

    reason = wait_for(unschedulable, timeout_s=120, what="untolerated Unschedulable", interval_s=1)
    assert "taint" in reason["message"], reason
