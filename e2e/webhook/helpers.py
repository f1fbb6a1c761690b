"""Creating pods through the API and reading back what the webhook made of them."""

from __future__ import annotations

from typing import Any

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.waiting import wait_for

RESOURCE = "/apis/resource.k8s.io/v1"


def gpu_pod(name: str, limits: dict[str, Any], **metadata: Any) -> Json:
    container = {
        "name": "main",
        "image": "registry.invalid/e2e/no-image:never-pulled",
        "resources": {"limits": limits},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **metadata},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
    }


def create_pod(kube: KubeClient, namespace: str, pod: Json, *, dry_run: bool = False) -> Json:
    query = {"dryRun": "All"} if dry_run else None
    return kube.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod, query=query)


def templates(kube: KubeClient, namespace: str) -> list[str]:
    items = kube.items(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates")
    return sorted(t["metadata"]["name"] for t in items)


def serve_namespace(kube: KubeClient, namespace: str, label: str) -> None:
    """Label `namespace` for the webhook registered for `label`, and wait until a dry-run GPU
    pod there comes back translated (the API server picks up the selector asynchronously)."""
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {label: "true"}}})
    probe = gpu_pod("probe", {"nvidia.com/gpu": 1})
    wait_for(
        lambda: "resourceClaims" in create_pod(kube, namespace, probe, dry_run=True)["spec"],
        timeout_s=20,
        what=f"the webhook for {label} to be called for namespace {namespace}",
    )
