"""Volcano on kind (``make e2e-kind`` collects this file after ``scenarios.py``; run only against
kind's kubeconfig): vc-scheduler and vc-controller-manager run as Deployments on images built
here from the Volcano tier's Go module (``volcano.py``, installed by ``python -m e2e.kind up``),
and ``examples/volcano/vcjob.yaml``, a gang of two workers in Volcano's vgpu names, is translated
by the chart's webhook, placed by vc-scheduler on the mock GPUs and runs: each container sees its
share, each claim consumes it, and the PodGroup asks for no GPU resource."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from e2e.kind import volcano
from e2e.kind.cluster import Kind, install
from e2e.kind.scenarios import (  # the fixtures and helpers of the kind scenarios
    api,
    core,
    example,
    kind,
    log_with,
    wait_pods_gone,
    workers,
)
from e2e.volcano.build import pinned_version
from e2e.waiting import wait_for
from vgpu_bridge.core.quantity import parse_quantity
from vgpu_bridge.kube import KubeApi

pytestmark = pytest.mark.e2e
__all__ = ["api", "core", "kind", "workers"]  # fixtures, used by name
Json = dict[str, Any]
EXAMPLE = "volcano/vcjob.yaml"
JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/{}/jobs"
PODGROUPS = "/apis/scheduling.volcano.sh/v1beta1/namespaces/{}/podgroups"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{}/resourceclaims"
#: what each worker of the example asks for, in Volcano's names
SHARE = {"memory_mib": 4096, "cores": 50}


@pytest.fixture(scope="module", autouse=True)
def chart(kind: Kind) -> None:
    """The chart installed (``scenarios.py`` ends by uninstalling it): helm upgrade --install."""
    install(kind)


@pytest.fixture(scope="module")
def gang(api: KubeApi, core: client.CoreV1Api) -> Iterator[tuple[str, list[Json]]]:
    """The example vcjob in a namespace of its own, once both its pods run; deleted after (its
    pods gone, so their claims are unprepared); Volcano's logs printed for a failure."""
    namespace = f"kind-vc-{secrets.token_hex(3)}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    api.create("/api/v1/namespaces", body)
    job = example(EXAMPLE)
    try:
        api.create(JOBS.format(namespace), job)
        yield (
            namespace,
            wait_for(
                lambda: running_pods(api, namespace, job["metadata"]["name"], 2),
                timeout_s=300,
                what="both pods of the vcjob Running",
                interval_s=2,
            ),
        )
    finally:
        print_volcano_logs(api, core)
        remove(api, namespace, job["metadata"]["name"])


def running_pods(api: KubeApi, namespace: str, job: str, count: int) -> list[Json] | None:
    selector = f"volcano.sh/job-name={job}"
    pods = api.list(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    return running if len(running) == count else None


def remove(api: KubeApi, namespace: str, job: str) -> None:
    api.delete(f"{JOBS.format(namespace)}/{job}")
    wait_pods_gone(api, namespace)
    api.delete(f"/api/v1/namespaces/{namespace}")


def print_volcano_logs(api: KubeApi, core: client.CoreV1Api) -> None:
    """The tail of each Volcano component's log (pytest shows it when a test failed)."""
    for item in api.list(f"/api/v1/namespaces/{volcano.NAMESPACE}/pods")["items"]:
        name = item["metadata"]["name"]
        log = core.read_namespaced_pod_log(name, volcano.NAMESPACE, tail_lines=60)
        print(f"--- {name} (last lines) ---\n{log}")


def test_volcano_runs_as_deployments_of_the_images_built_here(api: KubeApi) -> None:
    path = f"/apis/apps/v1/namespaces/{volcano.NAMESPACE}/deployments"
    for component in volcano.COMPONENTS:
        deployment = api.get(f"{path}/vc-{component}")
        assert deployment["status"].get("readyReplicas") == 1, deployment["status"]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == volcano.image(component, pinned_version())
    scheduler = api.get(f"{path}/vc-scheduler")["spec"]["template"]["spec"]["containers"][0]
    assert "--feature-gates=DRAConsumableCapacity=true" in scheduler["args"]


def test_the_gang_is_placed_by_vc_scheduler_on_the_mock_gpu_workers(
    api: KubeApi, gang: tuple[str, list[Json]], workers: list[str]
) -> None:
    namespace, pods = gang
    for pod in pods:
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["spec"]["nodeName"] in workers
        name = pod["metadata"]["name"]
        events = api.list(
            f"/api/v1/namespaces/{namespace}/events",
            fieldSelector=f"involvedObject.name={name},reason=Scheduled",
        )["items"]
        sources = {
            e.get("source", {}).get("component") or e.get("reportingComponent") for e in events
        }
        assert sources == {"volcano"}, events


def test_each_worker_sees_its_share_in_its_environment(
    core: client.CoreV1Api, gang: tuple[str, list[Json]]
) -> None:
    namespace, pods = gang
    for pod in pods:
        log = log_with(core, namespace, pod["metadata"]["name"], "CUDA_DEVICE_SM_LIMIT_0")
        assert f"CUDA_DEVICE_MEMORY_LIMIT_0={SHARE['memory_mib']}m" in log, log
        assert f"CUDA_DEVICE_SM_LIMIT_0={SHARE['cores']}" in log, log


def test_each_claim_vc_scheduler_allocated_consumes_the_share(
    api: KubeApi, gang: tuple[str, list[Json]]
) -> None:
    namespace, pods = gang
    owners = {pod["metadata"]["name"] for pod in pods}
    claims = api.list(CLAIMS.format(namespace))["items"]
    assert {c["status"]["reservedFor"][0]["name"] for c in claims} == owners
    for claim in claims:
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        consumed = result["consumedCapacity"]
        assert parse_quantity(consumed["memory"]) == SHARE["memory_mib"] * 2**20, result
        assert parse_quantity(consumed["cores"]) == SHARE["cores"], result


def test_the_job_is_translated_and_its_podgroup_asks_for_the_gang_and_no_gpu_resource(
    api: KubeApi, gang: tuple[str, list[Json]]
) -> None:
    """The webhook rewrote the Job's template (a claim instead of Volcano's vgpu limits), so
    vc-controller-manager's PodGroup asks for two pods and nothing else: the example's workers
    request no CPU, and no GPU key reaches ``minResources`` to block enqueue."""
    namespace, _ = gang
    written = example(EXAMPLE)
    name = written["metadata"]["name"]
    job = api.get(f"{JOBS.format(namespace)}/{name}")
    (task,) = job["spec"]["tasks"]
    (container,) = task["template"]["spec"]["containers"]
    assert not [k for k in container["resources"].get("limits") or {} if "vgpu" in k], container
    (claim,) = task["template"]["spec"]["resourceClaims"]
    assert claim["resourceClaimTemplateName"].startswith(f"vgpu-{name}-")
    group = job_podgroup(api, namespace, name)
    assert group["spec"]["minMember"] == written["spec"]["minAvailable"] == 2
    assert group["spec"]["minResources"] == {"count/pods": "2", "pods": "2"}
    # vc-scheduler writes the phase when a later session closes than the one that bound the pods
    # (CI once saw "Inqueue" with both pods already Running), so wait for it
    wait_for(
        lambda: job_podgroup(api, namespace, name).get("status", {}).get("phase") == "Running",
        timeout_s=60,
        what="the vcjob's PodGroup in phase Running",
        interval_s=1,
    )


def job_podgroup(api: KubeApi, namespace: str, job: str) -> Json:
    """The one PodGroup vc-controller-manager made for ``job``."""
    groups: list[Json] = [
        g
        for g in api.list(PODGROUPS.format(namespace))["items"]
        if any(o["name"] == job for o in g["metadata"]["ownerReferences"])
    ]
    (group,) = groups
    return group
