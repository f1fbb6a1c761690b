"""A pod admitted pointing at a template that is deleted a moment later, or whose deletion the
webhook had not yet heard of, still gets its claim: the template is made again as soon as the
deletion reaches the webhook's watch (webhook/restore.py). On the real API server, with the real
claim controller making (or failing to make) the claims."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator

import pytest

from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.client import ApiError, Json
from e2e.waiting import wait_for
from e2e.webhook.helpers import RESOURCE, create_pod, gpu_pod, templates
from e2e.webhook.process import WebhookProcess
from vgpu_bridge.core import TranslationContext, translate
from vgpu_bridge.core.jsonpatch import apply_patch
from vgpu_bridge.kube import KubeApi, load_client
from vgpu_bridge.webhook.restore import TemplateRestorer
from vgpu_bridge.webhook.templates import TemplateStore

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


def claim_of(kube: KubeClient, namespace: str, pod: str) -> str | None:
    """The name of the claim the controller made for the pod's first claim, once it has."""
    status = kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}").get("status") or {}
    for claim in status.get("resourceClaimStatuses") or ():
        name = claim.get("resourceClaimName")
        if name and kube.exists(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}"):
            return str(name)
    return None


def nudge(kube: KubeClient, namespace: str, pod: str) -> None:
    """Any change to a pod makes the claim controller look at it again (instead of waiting out
    the backoff of its failed tries)."""
    patch = {"metadata": {"labels": {"e2e.vgpu-bridge.io/nudge": secrets.token_hex(3)}}}
    kube.patch(f"/api/v1/namespaces/{namespace}/pods/{pod}", patch)


def claim_policy(ns: str) -> tuple[Json, Json]:
    """A ValidatingAdmissionPolicy refusing every ResourceClaim created in `ns`, and its binding."""
    name = f"e2e-hold-claims-{ns}"[:63]
    rules = [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"],
              "operations": ["CREATE"], "resources": ["resourceclaims"]}]  # fmt: skip
    refuse = [{"expression": "false", "message": "claims held by the test"}]
    policy = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
              "metadata": {"name": name}, "spec": {"failurePolicy": "Fail",
              "matchConstraints": {"resourceRules": rules}, "validations": refuse}}  # fmt: skip
    selector = {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": selector}}}  # fmt: skip
    return policy, binding


def claims_refused(kube: KubeClient, ns: str) -> bool:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.vgpu-bridge.io"}}
    spec = {"devices": {"requests": [request]}}
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "probe"}, "spec": spec}  # fmt: skip
    try:
        kube.request("POST", f"{RESOURCE}/namespaces/{ns}/resourceclaims", body=claim,
                     query={"dryRun": "All"})  # fmt: skip
    except ApiError as error:
        return "claims held by the test" in error.body
    return False


@pytest.fixture
def claims_held(kube: KubeClient, ns: str) -> Iterator[str]:
    """The API server refuses every claim created in `ns` (so the claim controller cannot make
    any) until the test deletes the path yielded."""
    policy, binding = claim_policy(ns)
    kube.create(POLICIES, policy)
    kube.create(BINDINGS, binding)
    wait_for(lambda: claims_refused(kube, ns), timeout_s=30, what="the policy to hold claims")
    path = f"{BINDINGS}/{binding['metadata']['name']}"
    yield path
    if kube.exists(path):
        kube.delete(path)
    kube.delete(f"{POLICIES}/{policy['metadata']['name']}")


def test_a_template_deleted_right_after_its_pod_was_admitted_is_made_again_for_its_claim(
    kube: KubeClient, ns: str, webhook: WebhookProcess, claims_held: str
) -> None:
    pod = create_pod(kube, ns, gpu_pod("waits", {"nvidia.com/gpumem": 1234}))
    [name] = [c["resourceClaimTemplateName"] for c in pod["spec"]["resourceClaims"]]
    assert claim_of(kube, ns, "waits") is None  # held by the policy: the pod waits for it
    kube.delete(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates/{name}")
    wait_for(lambda: name in templates(kube, ns), timeout_s=30, what="the template made again")
    kube.delete(claims_held)
    wait_for(lambda: not claims_refused(kube, ns), timeout_s=30, what="claims allowed again")

    def claimed() -> str | None:
        nudge(kube, ns, "waits")
        return claim_of(kube, ns, "waits")

    wait_for(claimed, timeout_s=60, what="the pod's claim, made from the template made again")


class HeldWatchApi(KubeApi):
    """The real client, whose watches start only once `release` is set: a watch that has not
    yet reported what happened, for as long as the test says."""

    release: threading.Event

    def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_s: int = 300,
        screen: Callable[[bytes], Json | None] | None = None,
        established: Callable[[], None] = lambda: None,
        **selectors: str,
    ) -> Iterator[Json]:
        self.release.wait()
        yield from super().watch(
            path,
            resource_version=resource_version,
            timeout_s=timeout_s,
            screen=screen,
            established=established,
            **selectors,
        )


@pytest.fixture
def held_api(e2e_cluster: LocalCluster) -> HeldWatchApi:
    api = HeldWatchApi(load_client(str(e2e_cluster.kubeconfig)), timeout_s=5.0)
    api.release = threading.Event()
    return api


def create_namespace(kube: KubeClient, name: str) -> None:
    kube.create("/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})  # fmt: skip


def namespace_gone(kube: KubeClient, name: str) -> bool:
    try:
        kube.get(f"/api/v1/namespaces/{name}")
    except ApiError as error:
        if error.status == 404:
            return True
        raise
    return False


def translated_pod(namespace: str) -> tuple[Json, list[Json]]:
    """A GPU pod as the webhook lets it through, and the templates it needs."""
    pod = gpu_pod("renewed", {"nvidia.com/gpumem": 2345}, namespace=namespace)
    plan = translate(pod, context=TranslationContext())
    return apply_patch(pod, plan.patch), list(plan.templates)


def test_a_pod_admitted_in_a_namespace_made_again_before_the_watch_saw_its_deletion_gets_its_claim(
    held_api: HeldWatchApi, kube: KubeClient
) -> None:
    """The kind-cluster finding, with the watch late: the namespace is deleted and made again,
    and a pod is admitted against the index's stale word that its template exists."""
    store, stop = TemplateStore(held_api, grace_s=600), threading.Event()
    restorer = TemplateRestorer(held_api, ensure=store.ensure)
    store.index.on_deleted = restorer.deleted
    threads = [threading.Thread(target=t, args=(stop,), daemon=True)
               for t in (store.index.run, restorer.run)]  # fmt: skip
    ns = f"renewed-{secrets.token_hex(3)}"
    pod, needed = translated_pod(ns)
    try:
        for thread in threads:
            thread.start()
        create_namespace(kube, ns)
        wait_for(store.index.synced.is_set, timeout_s=20, what="the template index to list")
        store.ensure(ns, needed)  # the first pod of the shape: made
        kube.delete(f"/api/v1/namespaces/{ns}")
        wait_for(lambda: namespace_gone(kube, ns), timeout_s=120, what="the namespace deleted")
        create_namespace(kube, ns)
        store.ensure(ns, needed)  # the index has not heard: it believes the template exists
        assert templates(kube, ns) == []
        kube.create(f"/api/v1/namespaces/{ns}/pods", pod)
        held_api.release.set()  # the deletion reaches the webhook now
        name = needed[0]["metadata"]["name"]
        wait_for(lambda: name in templates(kube, ns), timeout_s=30, what="the template again")
        wait_for(lambda: claim_of(kube, ns, "renewed"), timeout_s=60, what="the pod's claim")
    finally:
        stop.set()
        held_api.release.set()
        if not namespace_gone(kube, ns):
            kube.delete(f"/api/v1/namespaces/{ns}")
