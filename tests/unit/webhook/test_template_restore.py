"""A template of ours deleted while a pod still waits for its claim from it, or while a workload
names it, is made again from the deleted object; one nothing needs stays deleted. Against a real
`KubeApi` and a loopback API server that records every request; on the real API server in
e2e/webhook/test_template_restore.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from vgpu_bridge.core.claims import claim_template, template_name
from vgpu_bridge.core.workloads import WORKLOAD_KINDS, WorkloadKind
from vgpu_bridge.kube import api_path
from vgpu_bridge.webhook.restore import TemplateRestorer, restorable
from vgpu_bridge.webhook.templates import LAST_ADMITTED, TemplateIndex, TemplateStore
from vgpu_bridge.webhook.templates import templates_path as path_of_templates

NAMESPACE = "team-a"
POD = next(k for k in WORKLOAD_KINDS if k.kind == "Pod")
DEPLOYMENT = next(k for k in WORKLOAD_KINDS if k.kind == "Deployment")


def ours(memory: str = "1Gi") -> dict[str, Any]:
    spec = {"devices": {"requests": [{"name": "gpu", "memory": memory}]}}
    return claim_template(spec, name=template_name(spec), namespace=None)


def as_deleted(template: dict[str, Any]) -> dict[str, Any]:
    """The object a DELETED watch event carries: ours, with what the API server added."""
    meta = {**template["metadata"], "namespace": NAMESPACE, "uid": "0b6c4f1e", "resourceVersion":
            "4242", "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {LAST_ADMITTED: "2026-01-01T00:00:00Z"}}  # fmt: skip
    return {**template, "metadata": meta}


def name_of(template: dict[str, Any]) -> str:
    name: str = template["metadata"]["name"]
    return name


def pod(template: dict[str, Any], **status: Any) -> dict[str, Any]:
    claim = {"name": "gpu-0", "resourceClaimTemplateName": name_of(template)}
    return {"metadata": {"name": "p", "namespace": NAMESPACE},
            "spec": {"containers": [{"name": "main"}], "resourceClaims": [claim]},
            "status": status}  # fmt: skip


def deployment(template: dict[str, Any]) -> dict[str, Any]:
    claim = {"name": "gpu-0", "resourceClaimTemplateName": name_of(template)}
    spec = {"containers": [{"name": "main"}], "resourceClaims": [claim]}
    return {"metadata": {"name": "d", "namespace": NAMESPACE},
            "spec": {"replicas": 0, "template": {"spec": spec}}}  # fmt: skip


def serve(recorded: RecordingApi, kind: WorkloadKind, *items: dict[str, Any]) -> None:
    path = api_path(kind.api_prefix, "namespaces", NAMESPACE, kind.resource)
    recorded.answer("GET", path, 200, {"items": list(items)})


def restorer(recorded: RecordingApi) -> TemplateRestorer:
    index = TemplateIndex(recorded.api)
    index.replace([])  # listed: nothing of ours exists
    store = TemplateStore(recorded.api, grace_s=600, index=index)
    recorded.answer("POST", path_of_templates(NAMESPACE), 201)
    return TemplateRestorer(recorded.api, ensure=store.ensure)


def test_a_template_deleted_while_a_pod_waits_for_its_claim_is_made_again_as_it_was(
    recorded: RecordingApi,
) -> None:
    template = ours()
    serve(recorded, POD, pod(template))
    assert restorer(recorded).restore([as_deleted(template)]) == [
        f"{NAMESPACE}/{name_of(template)}"
    ]
    [create] = recorded.made("POST")
    assert create.path == path_of_templates(NAMESPACE)
    assert create.body["spec"] == template["spec"]
    assert create.body["metadata"]["name"] == name_of(template)
    assert create.body["metadata"]["labels"] == template["metadata"]["labels"]
    assert "resourceVersion" not in create.body["metadata"]
    assert "uid" not in create.body["metadata"]


def test_a_template_a_workload_names_is_made_again_for_its_future_pods(
    recorded: RecordingApi,
) -> None:
    template = ours()
    serve(recorded, DEPLOYMENT, deployment(template))
    assert restorer(recorded).restore([as_deleted(template)]) != []
    assert [c.body["metadata"]["name"] for c in recorded.made("POST")] == [name_of(template)]


@pytest.mark.parametrize(
    "status",
    [
        pytest.param(
            {"resourceClaimStatuses": [{"name": "gpu-0", "resourceClaimName": "p-gpu-0-x"}]},
            id="its-claim-is-made",
        ),
        pytest.param({"phase": "Succeeded"}, id="it-has-ended"),
        pytest.param({"phase": "Failed"}, id="it-has-failed"),
    ],
)
def test_a_template_no_pod_waits_for_stays_deleted(
    recorded: RecordingApi, status: dict[str, Any]
) -> None:
    template = ours()
    serve(recorded, POD, pod(template, **status))
    assert restorer(recorded).restore([as_deleted(template)]) == []
    assert recorded.made("POST") == []


def test_a_pod_being_deleted_and_other_templates_do_not_count(recorded: RecordingApi) -> None:
    template, other = ours(), ours("2Gi")
    leaving = pod(template)
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    serve(recorded, POD, leaving, pod(other))
    assert restorer(recorded).restore([as_deleted(template)]) == []
    assert recorded.made("POST") == []


def test_a_template_whose_name_is_not_the_hash_of_its_spec_is_never_made_again(
    recorded: RecordingApi,
) -> None:
    forged = ours()
    forged["spec"]["spec"]["devices"]["requests"][0]["memory"] = "80Gi"  # not what its name says
    serve(recorded, POD, pod(forged))
    assert restorable(as_deleted(forged)) is None
    assert restorer(recorded).restore([as_deleted(forged)]) == []
    assert recorded.calls == []  # not even looked for


def test_a_namespace_that_refuses_the_create_is_logged_and_skipped(
    recorded: RecordingApi,
) -> None:
    template = ours()
    serve(recorded, POD, pod(template))
    restoring = restorer(recorded)
    terminating = {"kind": "Status", "code": 403, "reason": "Forbidden"}
    recorded.answer("POST", path_of_templates(NAMESPACE), 403, terminating)
    assert restoring.restore([as_deleted(template)]) == []


def test_the_index_hands_each_deletion_to_the_restorer_which_makes_it_again_on_its_thread(
    recorded: RecordingApi,
) -> None:
    template = ours()
    serve(recorded, POD, pod(template))
    index = TemplateIndex(recorded.api)
    index.replace([as_deleted(template)])
    recorded.answer("POST", path_of_templates(NAMESPACE), 201)
    restoring = TemplateRestorer(
        recorded.api, ensure=TemplateStore(recorded.api, grace_s=600, index=index).ensure
    )
    index.on_deleted = restoring.deleted
    stop = threading.Event()
    worker = threading.Thread(target=restoring.run, args=(stop,), daemon=True)
    worker.start()
    try:
        index.apply("DELETED", as_deleted(template))
        for _ in range(600):  # a bound for a stuck worker, not a speed
            if recorded.made("POST"):
                break
            stop.wait(0.05)
        assert [c.body["metadata"]["name"] for c in recorded.made("POST")] == [name_of(template)]
    finally:
        stop.set()
        worker.join(timeout=10)
    assert index.get(NAMESPACE, name_of(template)) is not None  # known again, from the create
