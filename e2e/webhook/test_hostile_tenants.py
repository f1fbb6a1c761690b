"""What one tenant (or a careless hand) can do to the webhook through the real API server:
delete a template behind its back (it is made again before a pod points at it), fill a namespace
with shapes (refused past --max-templates-per-namespace, with the reason), publish ResourceSlices
the webhook cannot read (skipped; only our driver's are read at all)."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator

import pytest

from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.client import ApiError, Json
from e2e.dra_objects import resource_slice
from e2e.waiting import wait_for
from e2e.webhook.helpers import RESOURCE, create_pod, gpu_pod, serve_namespace, templates
from e2e.webhook.process import WebhookProcess, running_webhook
from vgpu_bridge.core import DEFAULT, TranslationContext, translate
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.webhook.inventory import InventoryCache
from vgpu_bridge.webhook.templates import TemplateStore

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
LABEL = "e2e.vgpu-bridge.io/webhook-hostile"
LIMIT = 2


@pytest.fixture(scope="module")
def strict_webhook(
    kube: KubeClient, e2e_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    """A webhook with its default sweeper grace (it would remember a template for 150 s) and at
    most LIMIT templates per namespace, for namespaces labelled LABEL=true."""
    with running_webhook(
        kube, e2e_cluster.kubeconfig, tmp_path_factory.mktemp("strict"), grace_s=None,
        namespace_label=LABEL, extra_args=["--max-templates-per-namespace", str(LIMIT)],
    ) as process:  # fmt: skip
        yield process
        print(process.log()[-4000:])


@pytest.fixture
def strict_ns(kube: KubeClient, namespace: str, strict_webhook: WebhookProcess) -> str:
    serve_namespace(kube, namespace, LABEL)
    return namespace


def claimed_template(pod: Json) -> str:
    return str(pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"])


def test_a_template_deleted_behind_the_webhooks_back_is_made_again(
    kube: KubeClient, strict_ns: str
) -> None:
    first = create_pod(kube, strict_ns, gpu_pod("first", {"nvidia.com/gpumem": 1111}))
    name = claimed_template(first)
    assert templates(kube, strict_ns) == [name]
    kube.delete(f"{RESOURCE}/namespaces/{strict_ns}/resourceclaimtemplates/{name}")
    pods = iter(range(1000))

    def next_pod_finds_its_template() -> bool:
        pod = create_pod(
            kube, strict_ns, gpu_pod(f"again-{next(pods)}", {"nvidia.com/gpumem": 1111})
        )
        return claimed_template(pod) == name and name in templates(kube, strict_ns)

    # the deletion reaches the webhook by its watch: a pod or two later it makes it again
    wait_for(next_pod_finds_its_template, timeout_s=30, what="the template to be made again")


def test_a_namespace_past_its_template_limit_refuses_new_shapes_only(
    kube: KubeClient, strict_ns: str
) -> None:
    for memory in range(1001, 1001 + LIMIT):
        create_pod(kube, strict_ns, gpu_pod(f"shape-{memory}", {"nvidia.com/gpumem": memory}))
    with pytest.raises(ApiError) as refused:
        create_pod(kube, strict_ns, gpu_pod("one-too-many", {"nvidia.com/gpumem": 2000}))
    assert "--max-templates-per-namespace" in refused.value.body
    assert len(templates(kube, strict_ns)) == LIMIT
    create_pod(kube, strict_ns, gpu_pod("known-shape", {"nvidia.com/gpumem": 1001}))  # admitted


@pytest.fixture
def api(e2e_cluster: LocalCluster) -> KubeApi:
    return KubeApi.connect(str(e2e_cluster.kubeconfig))


def test_a_template_of_a_namespace_deleted_and_made_again_is_made_again(
    api: KubeApi, kube: KubeClient
) -> None:
    """The kind-cluster finding: same namespace name, within the old memory of 150 s."""
    store, stop = TemplateStore(api, grace_s=600), threading.Event()
    watcher = threading.Thread(target=store.index.run, args=(stop,), daemon=True)
    watcher.start()
    ns = f"renewed-{secrets.token_hex(3)}"
    template = gpu_template(ns)
    try:
        for _ in range(2):
            kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": ns}})  # fmt: skip
            wait_for(store.index.synced.is_set, timeout_s=20, what="the template index")
            store.ensure(ns, [template])
            assert templates(kube, ns) == [template["metadata"]["name"]]
            kube.delete(f"/api/v1/namespaces/{ns}")
            wait_for(lambda: not namespace_exists(kube, ns), timeout_s=120, what="ns deletion")
            wait_for(lambda: store.index.count(ns) == 0, timeout_s=20, what="the index to see it")
    finally:
        stop.set()


def gpu_template(namespace: str) -> Json:
    pod = gpu_pod("x", {"nvidia.com/gpumem": 3210}, namespace=namespace)
    [template] = translate(pod, context=TranslationContext()).templates
    return template


def namespace_exists(kube: KubeClient, name: str) -> bool:
    try:
        kube.get(f"/api/v1/namespaces/{name}")
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return True


@pytest.fixture
def unreadable_slices(kube: KubeClient, fake_nodes: list[str]) -> Iterator[list[str]]:
    """A foreign driver's slice and one of ours, each with a card memory of 1.5 bytes."""
    made = []
    for driver in ("foreign.example.com", DEFAULT.driver):
        device = {"name": "gpu-odd", "capacity": {"memory": {"value": "1500m"}}}
        body = resource_slice(f"odd-{secrets.token_hex(3)}", driver=driver, node=fake_nodes[1],
                              devices=[device])  # fmt: skip
        body["spec"]["pool"]["name"] = f"{fake_nodes[1]}-odd-{secrets.token_hex(2)}"
        kube.create(f"{RESOURCE}/resourceslices", body)
        made.append(body["metadata"]["name"])
    yield made
    for name in made:
        kube.delete(f"{RESOURCE}/resourceslices/{name}")


def test_unreadable_slices_are_skipped_and_only_ours_are_read(
    api: KubeApi, unreadable_slices: list[str]
) -> None:
    cache, stop = (
        InventoryCache(api, driver=DEFAULT.driver, memory_capacity="memory"),
        threading.Event(),
    )
    threading.Thread(target=cache.run, args=(stop,), daemon=True).start()
    try:
        wait_for(cache.synced.is_set, timeout_s=30, what="the inventory to sync")
        _foreign, ours = unreadable_slices
        assert cache.unreadable() == [ours]  # the foreign one was never read
    finally:
        stop.set()
