"""Every template the webhook makes is owned by its MutatingWebhookConfiguration (ownership.py):
the uid written is one a GET confirmed a moment ago; with the configuration gone nothing is made,
restored or adopted; the sweeper's pass adopts our templates that have no owner or an earlier
configuration's. Against a real `KubeApi` and a loopback API server that records every request;
with the real garbage collector in e2e/webhook/test_template_owner.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from vgpu_bridge.core.claims import claim_template, template_name
from vgpu_bridge.core.workloads import WORKLOAD_KINDS
from vgpu_bridge.kube import api_path
from vgpu_bridge.webhook.ownership import CONFIGURATIONS, Owner, owner_reference
from vgpu_bridge.webhook.restore import TemplateRestorer
from vgpu_bridge.webhook.templates import (
    ALL_TEMPLATES,
    LAST_ADMITTED,
    Sweeper,
    TemplateIndex,
    TemplateOwnerGone,
    TemplateStore,
    templates_path,
)

NAMESPACE, CONFIGURATION = "team-a", "gpu-sharing-vgpu-bridge"
CONFIGURATION_PATH = api_path(CONFIGURATIONS, CONFIGURATION)
OURS = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "MutatingWebhookConfiguration",
    "name": CONFIGURATION,
    "uid": "uid-now",
    "blockOwnerDeletion": False,
    "controller": False,
}
POD = next(k for k in WORKLOAD_KINDS if k.kind == "Pod")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def template(memory: str = "1Gi") -> dict[str, Any]:
    spec = {"devices": {"requests": [{"name": "gpu", "memory": memory}]}}
    return claim_template(spec, name=template_name(spec), namespace=None)


def configuration_exists(recorded: RecordingApi, uid: str = "uid-now") -> None:
    recorded.objects[CONFIGURATION_PATH] = {"metadata": {"name": CONFIGURATION, "uid": uid}}


def store(recorded: RecordingApi, owner: Owner) -> TemplateStore:
    index = TemplateIndex(recorded.api)
    index.replace([])  # listed: nothing of ours exists yet
    recorded.answer("POST", templates_path(NAMESPACE), 201)
    return TemplateStore(recorded.api, grace_s=600, index=index, owner=owner)


def configuration_reads(recorded: RecordingApi) -> int:
    return sum(path == CONFIGURATION_PATH for path in recorded.paths)


def test_a_template_made_for_a_pod_names_the_configuration_as_its_owner(
    recorded: RecordingApi,
) -> None:
    configuration_exists(recorded)
    store(recorded, Owner(recorded.api, CONFIGURATION)).ensure(NAMESPACE, [template()])
    [create] = recorded.made("POST")
    assert create.body["metadata"]["ownerReferences"] == [OURS]


def test_without_a_configuration_named_templates_have_no_owner_and_nothing_is_read(
    recorded: RecordingApi,
) -> None:
    store(recorded, Owner(recorded.api, "")).ensure(NAMESPACE, [template()])
    [create] = recorded.made("POST")
    assert "ownerReferences" not in create.body["metadata"]
    assert configuration_reads(recorded) == 0


def test_the_uid_is_read_again_once_it_is_no_longer_fresh(recorded: RecordingApi) -> None:
    configuration_exists(recorded, "uid-before")
    clock = Clock()
    templates = store(recorded, Owner(recorded.api, CONFIGURATION, fresh_s=30, clock=clock))
    templates.ensure(NAMESPACE, [template("1Gi")])
    templates.ensure(NAMESPACE, [template("2Gi")])
    assert configuration_reads(recorded) == 1
    configuration_exists(recorded, "uid-now")  # deleted and made again (an uninstall, install)
    clock.now += 31
    templates.ensure(NAMESPACE, [template("3Gi")])
    uids = [c.body["metadata"]["ownerReferences"][0]["uid"] for c in recorded.made("POST")]
    assert uids == ["uid-before", "uid-before", "uid-now"]


def test_with_the_configuration_gone_no_template_is_made_and_the_refusal_says_why(
    recorded: RecordingApi,
) -> None:
    with pytest.raises(TemplateOwnerGone) as refused:
        store(recorded, Owner(recorded.api, CONFIGURATION)).ensure(NAMESPACE, [template()])
    assert f"MutatingWebhookConfiguration {CONFIGURATION}" in str(refused.value)
    assert "does not exist" in str(refused.value)
    assert recorded.made("POST") == []


def deleted(made: dict[str, Any]) -> dict[str, Any]:
    meta = {**made["metadata"], "namespace": NAMESPACE, "resourceVersion": "7",
            "annotations": {LAST_ADMITTED: "2026-01-01T00:00:00Z"}}  # fmt: skip
    return {**made, "metadata": meta}


def waiting_pod(made: dict[str, Any]) -> dict[str, Any]:
    claim = {"name": "gpu-0", "resourceClaimTemplateName": made["metadata"]["name"]}
    return {"metadata": {"name": "p", "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "main"}], "resourceClaims": [claim]}}  # fmt: skip


def test_the_restorer_makes_nothing_again_while_the_configuration_is_gone(
    recorded: RecordingApi,
) -> None:
    """An uninstall: the configuration is deleted first, then the garbage collector deletes the
    templates; a replica still running must not make them again for pods still waiting."""
    made = template()
    pods = api_path(POD.api_prefix, "namespaces", NAMESPACE, POD.resource)
    recorded.answer("GET", pods, 200, {"items": [waiting_pod(made)]})
    owner = Owner(recorded.api, CONFIGURATION)
    restorer = TemplateRestorer(recorded.api, ensure=store(recorded, owner).ensure, owner=owner)
    assert restorer.restore([deleted(made)]) == []
    assert recorded.made("POST") == []
    configuration_exists(recorded)  # installed again: a pod still waiting gets its template
    assert restorer.restore([deleted(made)]) == [f"{NAMESPACE}/{made['metadata']['name']}"]
    [create] = recorded.made("POST")
    assert create.body["metadata"]["ownerReferences"] == [OURS]


def listed(name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "resourceVersion": f"rv-{name}",
                            "creationTimestamp": "2026-01-01T00:00:00Z"}  # fmt: skip
    if owners:
        meta["ownerReferences"] = list(owners)
    return {"metadata": meta, "spec": {"spec": {}}}


def test_the_sweepers_pass_adopts_templates_without_our_current_owner(
    recorded: RecordingApi,
) -> None:
    configuration_exists(recorded)
    other = {"apiVersion": "example.com/v1", "kind": "Team", "name": "t", "uid": "uid-team"}
    stale = owner_reference(CONFIGURATION, "uid-of-an-earlier-install")
    templates = [listed("previous-release"), listed("earlier-install", stale, other),
                 listed("already-ours", OURS)]  # fmt: skip
    recorded.answer("GET", ALL_TEMPLATES, 200, {"metadata": {}, "items": templates})
    for name in ("previous-release", "earlier-install"):
        recorded.answer("PATCH", templates_path(NAMESPACE, name), 200, {"metadata": {}})
    sweeper = Sweeper(recorded.api, grace_s=1e9, owner=Owner(recorded.api, CONFIGURATION))
    sweeper.sweep_once()
    patches = {c.path.rsplit("/", 1)[1]: c.body["metadata"] for c in recorded.made("PATCH")}
    assert patches == {
        "previous-release": {"ownerReferences": [OURS], "resourceVersion": "rv-previous-release"},
        "earlier-install": {"ownerReferences": [other, OURS],
                            "resourceVersion": "rv-earlier-install"},
    }  # fmt: skip


def test_nothing_is_adopted_before_the_configuration_exists(recorded: RecordingApi) -> None:
    recorded.answer("GET", ALL_TEMPLATES, 200, {"metadata": {}, "items": [listed("old")]})
    sweeper = Sweeper(recorded.api, grace_s=1e9, owner=Owner(recorded.api, CONFIGURATION))
    assert sweeper.adopt([listed("old")]) == []
    assert recorded.made("PATCH") == []
    configuration_exists(recorded)  # helm install makes it after the Deployment
    recorded.answer("PATCH", templates_path(NAMESPACE, "old"), 200, {"metadata": {}})
    assert sweeper.adopt([listed("old")]) == [f"{NAMESPACE}/old"]


def test_a_template_changed_since_it_was_listed_is_left_for_the_next_pass(
    recorded: RecordingApi,
) -> None:
    configuration_exists(recorded)
    recorded.answer("PATCH", templates_path(NAMESPACE, "old"), 409)
    sweeper = Sweeper(recorded.api, grace_s=1e9, owner=Owner(recorded.api, CONFIGURATION))
    assert sweeper.adopt([listed("old")]) == []


def test_without_leave_to_read_the_configuration_the_refusal_names_the_missing_rule(
    recorded: RecordingApi,
) -> None:
    recorded.answer("GET", CONFIGURATION_PATH, 403)
    with pytest.raises(TemplateOwnerGone) as refused:
        store(recorded, Owner(recorded.api, CONFIGURATION)).ensure(NAMESPACE, [template()])
    assert "needs get on it" in str(refused.value)
    assert recorded.made("POST") == []


def test_a_pass_adopts_a_bounded_number_and_the_next_pass_the_rest(recorded: RecordingApi) -> None:
    configuration_exists(recorded)
    many = [listed(f"old-{i}") for i in range(5)]
    for made in many:
        recorded.answer("PATCH", templates_path(NAMESPACE, made["metadata"]["name"]), 200, {})
    sweeper = Sweeper(recorded.api, grace_s=1e9, owner=Owner(recorded.api, CONFIGURATION))
    sweeper.max_adopted_per_pass = 3
    assert len(sweeper.adopt(many)) == 3
    assert sweeper.adopt(many) == [f"{NAMESPACE}/old-3", f"{NAMESPACE}/old-4"]
