"""webhook.gpuObjectsOnly: the API server sends the webhook only objects that ask for GPUs. Shown
with the chart's configuration pointed at an address where nothing listens, failurePolicy Fail:
an object that is sent fails to be created, one that is not sent is created (dry runs)."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.chart.rendering import Helm, Json, one
from e2e.cluster import KubeClient
from e2e.cluster.client import ApiError
from e2e.waiting import wait_for
from vgpu_bridge.core import dialects

pytestmark = pytest.mark.e2e

CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
SERVED = "e2e.vgpu-bridge.io/chart-gpu-only"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: connections to it are refused


@pytest.fixture(scope="module")
def nowhere_config(helm: Helm, kube: KubeClient) -> Iterator[str]:
    values = {
        "webhook": {
            "gpuObjectsOnly": True,
            "workloads": True,  # their matchConditions are tested too
            "namespaceSelectorExpressions": [{"key": SERVED, "operator": "In", "values": ["true"]}],
        }
    }
    config = one(
        helm.template(values, release=f"vb-{secrets.token_hex(3)}"), "MutatingWebhookConfiguration"
    )
    for entry in config["webhooks"]:
        entry["clientConfig"] = {"url": f"https://127.0.0.1:{closed_port()}/mutate"}
        entry["timeoutSeconds"] = 2
    kube.create(CONFIGS, config)
    yield config["metadata"]["name"]
    kube.delete(f"{CONFIGS}/{config['metadata']['name']}")


@pytest.fixture
def ns(kube: KubeClient, namespace: str, nowhere_config: str) -> str:
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {SERVED: "true"}}})
    return namespace


def sent(kube: KubeClient, path: str, body: Json) -> bool:
    """True when the API server called the (unreachable) webhook for ``body``."""
    try:
        kube.request("POST", path, body=body, query={"dryRun": "All"})
    except ApiError as error:
        if "failed calling webhook" in error.body:
            return True
        raise
    return False


def pod(*, limits: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
        claims: bool = False, init: bool = False) -> Json:  # fmt: skip
    container: Json = {"name": "c", "image": "busybox", "resources": {"limits": limits or {}}}
    spec: Json = {"containers": [{"name": "main", "image": "busybox"}]}
    if init:
        spec["initContainers"] = [container]
    else:
        spec["containers"].append(container)
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "mine"}]
    meta: Json = {"name": "p", "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


POD_CASES = [
    ("hami-share", pod(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}), True),
    ("init-container-share", pod(limits={"nvidia.com/gpumem": 3000}, init=True), True),
    ("volcano-names", pod(limits={"volcano.sh/vgpu-number": 1}), True),
    ("kai-annotation", pod(annotations={"gpu-memory": "2048"}), True),
    ("hami-policy-annotation", pod(annotations={"hami.io/gpu-scheduler-policy": "spread"}), True),
    ("own-dra-claims", pod(claims=True), True),
    ("cpu-only", pod(limits={"cpu": "1"}), False),
    ("other-annotations", pod(annotations={"example.com/team": "a"}), False),
]


@pytest.mark.parametrize(
    ("body", "expected"), [c[1:] for c in POD_CASES], ids=[c[0] for c in POD_CASES]
)
def test_pods_are_sent_only_when_they_ask_for_gpus(
    kube: KubeClient, ns: str, body: Json, expected: bool
) -> None:
    path = f"/api/v1/namespaces/{ns}/pods"
    # the configuration reaches the API server's admission asynchronously
    wait_for(lambda: sent(kube, path, POD_CASES[0][1]), timeout_s=20, what="the configuration")
    assert sent(kube, path, body) is expected


def workload(kind: str, template: Json) -> Json:
    spec: Json = {"template": {**template, "metadata": {"labels": {"app": "w"}}}}
    if kind == "CronJob":
        spec["template"]["spec"]["restartPolicy"] = "Never"
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": {"name": "w"},
                "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": spec}}}  # fmt: skip
    spec["selector"] = {"matchLabels": {"app": "w"}}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w"}, "spec": spec}


@pytest.mark.parametrize(
    ("kind", "plural"), [("Deployment", "apps/v1/namespaces/{}/deployments"),
                         ("CronJob", "batch/v1/namespaces/{}/cronjobs")],
)  # fmt: skip
def test_workloads_are_sent_only_when_their_pods_ask_for_gpus(
    kube: KubeClient, ns: str, kind: str, plural: str
) -> None:
    path = "/apis/" + plural.format(ns)
    gpu = {"spec": pod(limits={"nvidia.com/gpumem": 3000})["spec"]}
    cpu = {"spec": pod(limits={"cpu": "1"})["spec"]}
    wait_for(lambda: sent(kube, path, workload(kind, gpu)), timeout_s=20, what="the configuration")
    assert not sent(kube, path, workload(kind, cpu))


#: every name the translator reads, from core's own lists: a pod carrying any one of them alone
#: must reach the webhook. `mps` is left out: KAI reads it only beside gpu-fraction (sent).
CORE_RESOURCES = sorted(dialects.TRANSLATED_RESOURCES)
CORE_ANNOTATIONS = sorted(set(dialects.ANNOTATIONS.all()) - {dialects.kai.MPS})


@pytest.mark.parametrize("resource", CORE_RESOURCES)
@pytest.mark.parametrize("section", ["limits", "requests"])
def test_every_resource_name_core_translates_is_sent(
    kube: KubeClient, ns: str, resource: str, section: str
) -> None:
    path = f"/api/v1/namespaces/{ns}/pods"
    wait_for(lambda: sent(kube, path, POD_CASES[0][1]), timeout_s=20, what="the configuration")
    body = pod()
    body["spec"]["containers"][1]["resources"] = {section: {resource: "1"}}
    # requests alone are invalid for an extended resource, but validation runs after mutating
    # admission: such a pod reaches the webhook (which translates it) or fails validation
    assert sent(kube, path, body)


@pytest.mark.parametrize("annotation", CORE_ANNOTATIONS)
def test_every_annotation_core_reads_is_sent(kube: KubeClient, ns: str, annotation: str) -> None:
    path = f"/api/v1/namespaces/{ns}/pods"
    wait_for(lambda: sent(kube, path, POD_CASES[0][1]), timeout_s=20, what="the configuration")
    assert sent(kube, path, pod(annotations={annotation: "1"}))
