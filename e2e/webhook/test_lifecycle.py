"""The webhook's I/O against the real API server: the sweeper's grace and stamps, the inventory
watch, pods that already claim our devices, and legacy HAMi detection."""

from __future__ import annotations

import http.client
import json
import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.client import ApiError, Json
from e2e.dra_objects import resource_slice, share_template
from e2e.waiting import wait_for
from e2e.webhook.helpers import create_pod, gpu_pod, templates
from e2e.webhook.our_driver import Card, shareable_card
from e2e.webhook.process import WebhookProcess
from vgpu_bridge.core import DEFAULT, Inventory, TranslationContext, translate
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.webhook.templates import Sweeper, TemplateStore

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
RESOURCE = "/apis/resource.k8s.io/v1"
GiB = 2**30


@pytest.fixture
def api(e2e_cluster: LocalCluster) -> KubeApi:
    return KubeApi.connect(str(e2e_cluster.kubeconfig))


def our_template(namespace: str, memory_mib: int) -> Json:
    pod = gpu_pod("x", {"nvidia.com/gpumem": memory_mib}, namespace=namespace)
    [template] = translate(pod, context=TranslationContext()).templates
    return template


def test_sweeper_keeps_a_recently_stamped_template_and_deletes_it_after_the_grace(
    api: KubeApi, kube: KubeClient, namespace: str
) -> None:
    now = time.time() + 3600  # stamped in the future: the webhook process's own sweeper keeps off
    store = TemplateStore(api, grace_s=60, clock=lambda: now)
    template = our_template(namespace, 4321)
    store.ensure(namespace, [template])
    store.ensure(namespace, [template])  # idempotent: exists, same spec
    assert templates(kube, namespace) == [template["metadata"]["name"]]
    replica = TemplateStore(api, grace_s=60, clock=lambda: now + 1)  # a second webhook replica
    replica.ensure(namespace, [template])  # finds ours, compares; stamped a second ago: no write
    replica = TemplateStore(api, grace_s=60, clock=lambda: now + 16)  # past grace / 4
    replica.ensure(namespace, [template])  # finds ours, compares, stamps it
    path = (
        f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates/{template['metadata']['name']}"
    )
    stamp = kube.get(path)["metadata"]["annotations"]["vgpu-bridge.io/last-admitted"]
    assert stamp == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 16))

    # The sweeper works cluster-wide: templates other tests left unreferenced in their own
    # (still terminating) namespaces may go too; this test judges its own namespace.
    within = Sweeper(api, grace_s=60, clock=lambda: now + 30)
    assert _in(namespace, within.sweep_once()) == []
    after = Sweeper(api, grace_s=60, clock=lambda: now + 120)
    assert _in(namespace, after.sweep_once()) == [f"{namespace}/{template['metadata']['name']}"]
    assert templates(kube, namespace) == []


def _in(namespace: str, swept: list[str]) -> list[str]:
    return [name for name in swept if name.startswith(f"{namespace}/")]


def test_sweeper_keeps_templates_that_a_workload_references(
    api: KubeApi, kube: KubeClient, namespace: str
) -> None:
    template = our_template(namespace, 2345)
    TemplateStore(api, grace_s=60).ensure(namespace, [template])
    pod_template = gpu_pod("t", {})
    pod_template["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    pod_template["metadata"] = {"labels": {"app": "kept"}}
    kube.create(
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "kept"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "kept"}},
                "template": pod_template,
            },
        },
    )
    later = Sweeper(api, grace_s=60, clock=lambda: time.time() + 600)
    assert _in(namespace, later.sweep_once()) == []
    assert templates(kube, namespace) == [template["metadata"]["name"]]


@pytest.fixture
def extra_card_size(
    kube: KubeClient, fake_nodes: list[str], webhook: WebhookProcess
) -> Iterator[int]:
    """A third card size (24Gi), published while the webhook runs."""
    body = resource_slice(
        f"extra-{DEFAULT.driver}",
        driver=DEFAULT.driver,
        node=fake_nodes[1],
        devices=[shareable_card(Card("gpu-extra", "GPU-e2e-extra", "NVIDIA L4", "24Gi"))],
    )
    body["spec"]["pool"]["name"] = f"{fake_nodes[1]}-extra"
    kube.create(f"{RESOURCE}/resourceslices", body)
    yield 24 * GiB
    kube.delete(f"{RESOURCE}/resourceslices/{body['metadata']['name']}")


def test_inventory_watch_sees_a_card_size_published_after_start(
    kube: KubeClient, ns: str, extra_card_size: int
) -> None:
    pod = gpu_pod("pct", {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50}, namespace=ns)
    sizes = frozenset({40 * GiB, 80 * GiB, extra_card_size})
    context = TranslationContext(inventory=Inventory({DEFAULT.driver: sizes}))
    [expected] = translate(pod, context=context).templates

    def template_of_dry_run() -> bool:
        answered = create_pod(kube, ns, pod, dry_run=True)
        claim = answered["spec"]["resourceClaims"][0]
        return bool(claim["resourceClaimTemplateName"] == expected["metadata"]["name"])

    wait_for(template_of_dry_run, timeout_s=20, what="the webhook to see the 24Gi card")


def test_pod_that_already_claims_our_devices_is_refused(kube: KubeClient, ns: str) -> None:
    kube.create(
        f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
        share_template("mine", device_class_name=DEFAULT.device_class, capacity={"cores": "10"}),
    )
    pod = gpu_pod("mixed", {"nvidia.com/gpumem": 100})
    pod["spec"]["resourceClaims"] = [{"name": "own", "resourceClaimTemplateName": "mine"}]
    with pytest.raises(ApiError) as refused:
        create_pod(kube, ns, pod)
    assert (
        "spec.resourceClaims[0]: already claims devices of class gpu.vgpu-bridge.io"
        in refused.value.body
    )


def direct_review(webhook: WebhookProcess, obj: Json, namespace: str) -> dict[str, Any]:
    request = {
        "uid": "direct",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": namespace,
        "object": obj,
        "dryRun": True,
    }
    body = json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )
    context = ssl.create_default_context(cafile=str(webhook.cert_file))
    conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=context, timeout=10)
    conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
    response: dict[str, Any] = json.loads(conn.getresponse().read())["response"]
    conn.close()
    return response


def test_legacy_hami_nodes_produce_a_warning(
    kube: KubeClient, fake_nodes: list[str], webhook: WebhookProcess, ns: str
) -> None:
    node_path = f"/api/v1/nodes/{fake_nodes[0]}"
    annotation = "hami.io/node-nvidia-register"
    kube.patch(node_path, {"metadata": {"annotations": {annotation: "[]"}}})
    try:
        pod = gpu_pod("legacy", {"nvidia.com/gpu": 1})
        wait_for(
            lambda: any(
                "legacy HAMi" in w for w in direct_review(webhook, pod, ns).get("warnings", [])
            ),
            timeout_s=20,
            what="a legacy-HAMi warning",
        )
    finally:
        kube.patch(node_path, {"metadata": {"annotations": {annotation: None}}})
    wait_for(
        lambda: not direct_review(webhook, pod, ns).get("warnings"),
        timeout_s=20,
        what="the warning to go once HAMi is gone",
    )
