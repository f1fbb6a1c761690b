"""`helm uninstall` leaves none of our ResourceClaimTemplates behind: each one the webhook makes
is owned by its MutatingWebhookConfiguration (`--webhook-configuration`, webhook/ownership.py),
so the real garbage collector of the local control plane deletes them with it; a replica still
running does not make them again meanwhile; templates made without an owner (the previous
release) are adopted. The webhook runs as a process registered under the configuration it is
told owns its templates, as the chart runs it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.client import Json
from e2e.waiting import wait_for
from e2e.webhook.helpers import RESOURCE, create_pod, gpu_pod, serve_namespace, templates
from e2e.webhook.process import CONFIGS, WebhookProcess, running_webhook
from e2e.webhook.test_template_restore import (
    BINDINGS,
    POLICIES,
    claim_of,
    claim_policy,
    claims_refused,
)
from vgpu_bridge.core.claims import claim_template, template_name

pytestmark = pytest.mark.e2e
LABEL = "e2e.vgpu-bridge.io/owning-webhook"


class OwningWebhook:
    """A webhook process whose templates its configuration owns, and the namespace it serves."""

    def __init__(self, process: WebhookProcess, configuration: str, namespace: str) -> None:
        self.process, self.configuration, self.namespace = process, configuration, namespace

    def owner(self, kube: KubeClient) -> Json:
        uid = kube.get(f"{CONFIGS}/{self.configuration}")["metadata"]["uid"]
        return {"apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration", "name": self.configuration, "uid": uid,
                "blockOwnerDeletion": False, "controller": False}  # fmt: skip

    def template(self, kube: KubeClient, name: str) -> Json | None:
        path = f"{RESOURCE}/namespaces/{self.namespace}/resourceclaimtemplates/{name}"
        return kube.get(path) if kube.exists(path) else None


@pytest.fixture
def owning(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, tmp_path: Path
) -> Iterator[OwningWebhook]:
    """A webhook of its own per test (one test deletes its configuration), serving `namespace`
    only, sweeping (and so adopting) every second, deleting nothing the test makes."""
    suffix = secrets.token_hex(4)
    label, configuration = f"{LABEL}-{suffix}", f"gpu-sharing-e2e-owner-{suffix}"
    with running_webhook(
        kube,
        e2e_cluster.kubeconfig,
        tmp_path / "webhook",
        grace_s=600,
        namespace_label=label,
        config_name=configuration,
        extra_args=["--webhook-configuration", configuration],
    ) as process:
        serve_namespace(kube, namespace, label)
        yield OwningWebhook(process, configuration, namespace)
        print(process.log()[-4000:])  # shown by pytest for failed tests


@pytest.fixture
def claims_held(kube: KubeClient, namespace: str) -> Iterator[None]:
    """The API server refuses every claim created in `namespace`: its pods wait for their
    claims, so their templates stay needed."""
    policy, binding = claim_policy(namespace)
    kube.create(POLICIES, policy)
    kube.create(BINDINGS, binding)
    wait_for(lambda: claims_refused(kube, namespace), timeout_s=30, what="claims held")
    yield
    kube.delete(f"{BINDINGS}/{binding['metadata']['name']}")
    kube.delete(f"{POLICIES}/{policy['metadata']['name']}")


def pod_template(kube: KubeClient, namespace: str, pod: str, gpumem: int) -> str:
    created = create_pod(kube, namespace, gpu_pod(pod, {"nvidia.com/gpumem": gpumem}))
    [name] = [c["resourceClaimTemplateName"] for c in created["spec"]["resourceClaims"]]
    return str(name)


def test_a_translated_pods_template_is_owned_by_the_webhooks_configuration(
    kube: KubeClient, owning: OwningWebhook
) -> None:
    name = pod_template(kube, owning.namespace, "owned", 1111)
    made = owning.template(kube, name)
    assert made is not None
    assert made["metadata"]["ownerReferences"] == [owning.owner(kube)]


def test_a_template_of_ours_without_an_owner_is_adopted(
    kube: KubeClient, owning: OwningWebhook
) -> None:
    """As the previous release (fdf5730) made them: labelled ours, named by its spec's hash."""
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.vgpu-bridge.io", "count": 1}}]}}  # fmt: skip
    old = claim_template(spec, name=template_name(spec), namespace=owning.namespace)
    path = f"{RESOURCE}/namespaces/{owning.namespace}/resourceclaimtemplates"
    kube.create(path, old)
    name = old["metadata"]["name"]

    def adopted() -> list[Json] | None:
        made = owning.template(kube, name) or {}
        owners: list[Json] | None = (made.get("metadata") or {}).get("ownerReferences")
        return owners

    assert wait_for(adopted, timeout_s=30, what="the template adopted") == [owning.owner(kube)]


def test_deleting_the_configuration_deletes_its_templates_and_none_is_made_again(
    kube: KubeClient, owning: OwningWebhook, claims_held: None
) -> None:
    """An uninstall deletes the configuration first; the garbage collector then deletes every
    template, also one a pod still waits for, and the replica still running lets it. (The e2e
    session's other webhooks, which own nothing, follow every template of ours and may make a
    still-needed one again in this namespace: what must hold is that this replica makes none.)"""
    waiting = pod_template(kube, owning.namespace, "waits", 2222)
    done = pod_template(kube, owning.namespace, "other-shape", 3333)
    assert claim_of(kube, owning.namespace, "waits") is None
    assert set(templates(kube, owning.namespace)) == {waiting, done}
    owner_uid = owning.owner(kube)["uid"]
    kube.delete(f"{CONFIGS}/{owning.configuration}")
    wait_for(lambda: not owned_by(kube, owning.namespace, owner_uid), timeout_s=60,
             what="the garbage collector to delete the templates")  # fmt: skip
    wait_for(lambda: "their owner is gone" in owning.process.log(), timeout_s=30,
             what="the restorer to see the deletions")  # fmt: skip
    log = owning.process.log()
    assert "restored deleted claim templates" not in log, log[-3000:]
    assert not owned_by(kube, owning.namespace, owner_uid), log[-3000:]


def owned_by(kube: KubeClient, namespace: str, uid: str) -> list[str]:
    """The templates in `namespace` that name `uid` as their owner."""
    items = kube.items(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates")
    return sorted(
        t["metadata"]["name"]
        for t in items
        if any(o.get("uid") == uid for o in t["metadata"].get("ownerReferences") or ())
    )
