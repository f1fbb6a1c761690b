"""Creating pods that use claim templates, and waiting on what the control plane does with them."""

from __future__ import annotations

from collections.abc import Mapping

from e2e.cluster.client import ApiError, Json, KubeClient
from e2e.dra_objects import pod_with_claim_template, share_template
from e2e.waiting import wait_for
from vgpu_bridge.core import DriverProfile, TranslationContext, translate

RESOURCE = "/apis/resource.k8s.io/v1"


def create_share_template(
    kube: KubeClient, namespace: str, name: str, *, device_class: str, capacity: Mapping[str, str]
) -> None:
    body = share_template(name, device_class_name=device_class, capacity=capacity)
    kube.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates", body)


def create_pod(
    kube: KubeClient, namespace: str, name: str, *, template: str, node: str | None = None
) -> None:
    body = pod_with_claim_template(name, template=template, node=node)
    kube.create(f"/api/v1/namespaces/{namespace}/pods", body)


def get_pod(kube: KubeClient, namespace: str, name: str) -> Json:
    return kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")


def running_pod(kube: KubeClient, namespace: str, name: str, *, timeout_s: float = 60) -> Json:
    """Wait until the pod is bound and the kubelet stand-in reports it Running."""

    def running() -> Json | None:
        pod = get_pod(kube, namespace, name)
        return pod if pod["status"].get("phase") == "Running" else None

    return wait_for(running, timeout_s=timeout_s, what=f"pod {namespace}/{name} Running")


def claim_of(kube: KubeClient, namespace: str, pod: Json) -> Json:
    """The one ResourceClaim the controller generated for ``pod``."""
    statuses = pod["status"]["resourceClaimStatuses"]
    assert len(statuses) == 1, statuses
    name = statuses[0]["resourceClaimName"]
    return kube.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")


def only_result(claim: Json) -> Json:
    """The single device allocation result of a one-request claim."""
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 1, results
    result: Json = results[0]
    return result


def unschedulable_condition(kube: KubeClient, namespace: str, name: str) -> Json | None:
    """The pod's ``PodScheduled=False, reason=Unschedulable`` condition, if it has one."""
    for condition in get_pod(kube, namespace, name)["status"].get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            found: Json = condition
            return found
    return None


def is_unbound(kube: KubeClient, namespace: str, name: str) -> bool:
    return not get_pod(kube, namespace, name)["spec"].get("nodeName")


def create_hami_pod(
    kube: KubeClient, namespace: str, name: str, profile: DriverProfile, **limits: str
) -> None:
    """A HAMi pod asking for one card with these `nvidia.com/<name>` limits, as admitted."""
    pod: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/e2e/no-image:never-pulled",
                    "resources": {"limits": {f"nvidia.com/{k}": v for k, v in limits.items()}},
                }
            ]
        },
    }
    plan = translate(pod, context=TranslationContext(profile=profile))
    for template in plan.templates:
        try:
            kube.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates", template)
        except ApiError as error:
            if error.status != 409:  # pods of one shape share a template
                raise
    kube.create(f"/api/v1/namespaces/{namespace}/pods", plan.apply_to(pod))
