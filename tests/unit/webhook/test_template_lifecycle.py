"""The webhook's template store and sweeper against a real `KubeApi` and a loopback API server
that records every request: what each writes, with which preconditions, and what it leaves alone.
The same lifecycle against a real API server is in e2e/webhook/test_lifecycle.py."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over
from vgpu_bridge.core.claims import claim_template, template_name
from vgpu_bridge.core.workloads import WORKLOAD_KINDS, WorkloadKind
from vgpu_bridge.kube import LIST_PAGE_SIZE, KubeError, api_path
from vgpu_bridge.webhook.templates import (
    ALL_TEMPLATES,
    LAST_ADMITTED,
    OURS,
    Sweeper,
    TemplateConflict,
    TemplateIndex,
    TemplateLimit,
    TemplateStore,
    templates_path,
)

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC).timestamp()
GRACE_S = 600.0
NAMESPACE = "team-a"


def stamp(seconds_ago: float) -> str:
    return datetime.fromtimestamp(NOW - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ours(memory: str = "1Gi") -> dict[str, Any]:
    """A template as core builds it for one shape (its name is a function of its spec)."""
    spec = {"devices": {"requests": [{"name": "gpu", "memory": memory}]}}
    return claim_template(spec, name=template_name(spec), namespace=None)


def stored(
    template: dict[str, Any],
    *,
    created_ago: float,
    stamped_ago: float | None = None,
    version: str = "1",
) -> dict[str, Any]:
    """`template` as the API server holds it in NAMESPACE."""
    meta = {**template["metadata"], "namespace": NAMESPACE, "resourceVersion": version,
            "creationTimestamp": stamp(created_ago)}  # fmt: skip
    if stamped_ago is not None:
        meta["annotations"] = {LAST_ADMITTED: stamp(stamped_ago)}
    return {**template, "metadata": meta}


def name_of(template: dict[str, Any]) -> str:
    name: str = template["metadata"]["name"]
    return name


def store(recorded: RecordingApi, **options: Any) -> TemplateStore:
    return TemplateStore(recorded.api, grace_s=GRACE_S, clock=lambda: NOW, **options)


def sweeper(recorded: RecordingApi) -> Sweeper:
    return Sweeper(recorded.api, grace_s=GRACE_S, clock=lambda: NOW)


def writes(recorded: RecordingApi) -> list[tuple[str, str]]:
    return [(c.method, c.path) for c in recorded.calls if c.method != "GET"]


def serve_templates(recorded: RecordingApi, *templates: dict[str, Any]) -> None:
    """What a list of our templates, in NAMESPACE or everywhere, answers."""
    for path in (templates_path(NAMESPACE), ALL_TEMPLATES):
        recorded.answer("GET", path, 200, {"items": list(templates)})


# The store


def test_a_missing_template_is_created_once_stamped_and_ensuring_it_again_writes_nothing(
    recorded: RecordingApi,
) -> None:
    template = ours()
    serve_templates(recorded)
    recorded.answer("POST", templates_path(NAMESPACE), 201)
    templates = store(recorded)
    templates.ensure(NAMESPACE, [template])
    templates.ensure(NAMESPACE, [template])
    [create] = recorded.made("POST")
    assert create.path == templates_path(NAMESPACE)
    assert create.body["metadata"]["namespace"] == NAMESPACE
    assert create.body["metadata"]["annotations"] == {LAST_ADMITTED: stamp(0)}
    assert create.body["spec"] == template["spec"]
    assert writes(recorded) == [("POST", templates_path(NAMESPACE))]
    assert "namespace" not in template["metadata"]  # the plan's template is left as it was


def test_a_template_that_exists_with_our_spec_is_not_created_again(
    recorded: RecordingApi,
) -> None:
    template = ours()
    path = templates_path(NAMESPACE, name_of(template))
    recorded.objects[path] = stored(template, created_ago=3600, stamped_ago=10)
    store(recorded).ensure(NAMESPACE, [template])
    assert recorded.paths == [path]  # the index cannot tell yet: it asks for that one name
    assert writes(recorded) == []


def test_a_template_last_stamped_a_quarter_grace_ago_is_stamped_again_once(
    recorded: RecordingApi,
) -> None:
    template = ours()
    path = templates_path(NAMESPACE, name_of(template))
    recorded.objects[path] = stored(template, created_ago=3600, stamped_ago=GRACE_S / 4)
    recorded.answer("PATCH", path, 200, stored(template, created_ago=3600, stamped_ago=0))
    templates = store(recorded)
    templates.ensure(NAMESPACE, [template])
    templates.ensure(NAMESPACE, [template])
    [patch] = recorded.made("PATCH")
    assert patch.path == path
    assert patch.body == {"metadata": {"annotations": {LAST_ADMITTED: stamp(0)}}}


def test_a_same_named_template_with_another_spec_is_a_conflict_naming_it(
    recorded: RecordingApi,
) -> None:
    template, theirs = ours("1Gi"), ours("2Gi")
    theirs["metadata"]["name"] = name_of(template)
    path = templates_path(NAMESPACE, name_of(template))
    recorded.objects[path] = stored(theirs, created_ago=3600, stamped_ago=10)
    with pytest.raises(TemplateConflict, match=f"{NAMESPACE}/{name_of(template)} exists with a"):
        store(recorded).ensure(NAMESPACE, [template])
    assert writes(recorded) == []


@pytest.mark.parametrize("same_spec", [True, False], ids=["our spec", "another spec"])
def test_a_template_made_meanwhile_by_another_replica_is_accepted_only_with_our_spec(
    recorded: RecordingApi, same_spec: bool
) -> None:
    template = ours("1Gi")
    made = template if same_spec else {**ours("2Gi"), "metadata": template["metadata"]}
    path = templates_path(NAMESPACE, name_of(template))
    recorded.answer("POST", templates_path(NAMESPACE), 409, {"kind": "Status", "code": 409})
    recorded.objects[path] = stored(made, created_ago=1, stamped_ago=1)
    index = TemplateIndex(recorded.api)
    index.replace([])  # listed before the other replica made it
    if same_spec:
        store(recorded, index=index).ensure(NAMESPACE, [template])
    else:
        with pytest.raises(TemplateConflict, match=f"{NAMESPACE}/{name_of(template)}"):
            store(recorded, index=index).ensure(NAMESPACE, [template])
    assert writes(recorded) == [("POST", templates_path(NAMESPACE))]


def test_a_template_the_api_server_altered_on_create_is_deleted_and_a_conflict(
    recorded: RecordingApi,
) -> None:
    template = ours()
    altered = stored(template, created_ago=0)
    altered["spec"] = {**altered["spec"], "spec": {"devices": {"requests": [{"name": "gpu"}]}}}
    path = templates_path(NAMESPACE, name_of(template))
    serve_templates(recorded)
    recorded.answer("POST", templates_path(NAMESPACE), 201, altered)
    recorded.answer("DELETE", path, 200, {"kind": "Status", "status": "Success"})
    with pytest.raises(TemplateConflict, match=r"changed ResourceClaimTemplate .* feature gate"):
        store(recorded).ensure(NAMESPACE, [template])
    assert writes(recorded) == [("POST", templates_path(NAMESPACE)), ("DELETE", path)]


def test_the_store_keeps_the_index_it_is_given_even_an_empty_one(recorded: RecordingApi) -> None:
    index = TemplateIndex(recorded.api)
    assert store(recorded, index=index).index is index


def test_a_template_deleted_behind_the_stores_back_is_made_again(recorded: RecordingApi) -> None:
    template = ours()
    path = templates_path(NAMESPACE, name_of(template))
    index = TemplateIndex(recorded.api)
    index.replace([stored(template, created_ago=3600, stamped_ago=3600)])  # the delete unseen
    recorded.answer("PATCH", path, 404, {"kind": "Status", "code": 404})
    recorded.answer("POST", templates_path(NAMESPACE), 201)
    store(recorded, index=index).ensure(NAMESPACE, [template])
    assert writes(recorded) == [("PATCH", path), ("POST", templates_path(NAMESPACE))]
    assert index.count(NAMESPACE) == 1


def test_a_namespace_at_its_limit_refuses_a_new_shape_naming_the_flag(
    recorded: RecordingApi,
) -> None:
    serve_templates(recorded, ours("1Gi"), ours("2Gi"))
    with pytest.raises(TemplateLimit, match="--max-templates-per-namespace") as refused:
        store(recorded, max_per_namespace=2).ensure(NAMESPACE, [ours("3Gi")])
    assert f"namespace {NAMESPACE} already holds 2" in str(refused.value)
    [listed] = [c for c in recorded.calls if c.path == templates_path(NAMESPACE)]
    assert listed.query == {"labelSelector": OURS, "limit": "2"}
    assert writes(recorded) == []


def test_a_namespace_at_its_limit_by_its_index_refuses_a_new_shape_without_listing(
    recorded: RecordingApi,
) -> None:
    index = TemplateIndex(recorded.api)
    index.replace([stored(ours(m), created_ago=60) for m in ("1Gi", "2Gi")])
    with pytest.raises(TemplateLimit):
        store(recorded, index=index, max_per_namespace=2).ensure(NAMESPACE, [ours("3Gi")])
    assert recorded.calls == []


def test_a_namespace_at_its_limit_still_admits_a_shape_it_holds(recorded: RecordingApi) -> None:
    held = ours("1Gi")
    recorded.objects[templates_path(NAMESPACE, name_of(held))] = stored(
        held, created_ago=3600, stamped_ago=10
    )
    serve_templates(recorded, held, ours("2Gi"))
    store(recorded, max_per_namespace=2).ensure(NAMESPACE, [held])
    assert writes(recorded) == []


# Dry runs: the store does not know them; the admitter does not call it for one.

GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p"},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "cuda",
                "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}},
            }
        ]
    },
}


def admit(recorded: RecordingApi, *, dry_run: bool) -> dict[str, Any]:
    admitter = admitter_over(recorded, store=store(recorded))
    request = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "operation": "CREATE", "namespace": NAMESPACE, "object": GPU_POD,
               "dryRun": dry_run}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    status, data = admitter.review_body(json.dumps(body).encode())
    assert status == 200, data
    response: dict[str, Any] = json.loads(data)["response"]
    assert response["allowed"] is True, response
    return response


def test_a_dry_run_admission_translates_but_writes_no_template(recorded: RecordingApi) -> None:
    response = admit(recorded, dry_run=True)
    assert "patch" in response
    assert recorded.calls == []


def test_the_same_admission_for_real_creates_its_template(recorded: RecordingApi) -> None:
    serve_templates(recorded)
    recorded.answer("POST", templates_path(NAMESPACE), 201)
    response = admit(recorded, dry_run=False)
    [create] = recorded.made("POST")
    assert create.path == templates_path(NAMESPACE)
    patch = base64.b64decode(response["patch"]).decode()
    assert f'"resourceClaimTemplateName": "{create.body["metadata"]["name"]}"' in patch


# The sweeper

REFERRERS = [kind for kind in WORKLOAD_KINDS if kind.holds_pod_templates]
DELETED = {"kind": "Status", "apiVersion": "v1", "status": "Success"}


def referring(kind: WorkloadKind, template: dict[str, Any]) -> dict[str, Any]:
    """An object of `kind` (as a list item: no apiVersion or kind) whose pods use `template`."""
    claim = {"name": "gpu", "resourceClaimTemplateName": name_of(template)}
    node: dict[str, Any] = {"spec": {"containers": [], "resourceClaims": [claim]}}
    if kind.template_path is None:  # a Volcano Job: one pod template per task
        node = {"spec": {"tasks": [{"name": "workers", "template": node}]}}
    else:
        for key in reversed(kind.template_path):
            node = {str(key): node}
    return {"metadata": {"name": "uses-it", "namespace": NAMESPACE}, **node}


def list_path(kind: WorkloadKind) -> str:
    return api_path(kind.api_prefix, "namespaces", NAMESPACE, kind.resource)


def test_a_template_unreferenced_past_the_grace_is_deleted_with_its_resource_version(
    recorded: RecordingApi,
) -> None:
    old = stored(ours(), created_ago=7200, stamped_ago=GRACE_S + 1, version="42")
    serve_templates(recorded, old)
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(old)), 200, DELETED)
    assert sweeper(recorded).sweep_once() == [f"{NAMESPACE}/{name_of(old)}"]
    [listed] = [c for c in recorded.calls if c.path == ALL_TEMPLATES]
    assert listed.query == {"labelSelector": OURS, "limit": str(LIST_PAGE_SIZE)}  # paged
    [delete] = recorded.made("DELETE")
    assert delete.path == templates_path(NAMESPACE, name_of(old))
    assert delete.body["preconditions"] == {"resourceVersion": "42"}


@pytest.mark.parametrize("kind", REFERRERS, ids=[f"{k.api_version}/{k.kind}" for k in REFERRERS])
def test_a_template_still_referenced_by_a_workload_of_any_kind_in_cores_table_is_kept(
    recorded: RecordingApi, kind: WorkloadKind
) -> None:
    used, unused = ours("1Gi"), ours("2Gi")
    serve_templates(recorded, *(stored(t, created_ago=7200) for t in (used, unused)))
    recorded.answer("GET", list_path(kind), 200, {"items": [referring(kind, used)]})
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(unused)), 200, DELETED)
    assert sweeper(recorded).sweep_once() == [f"{NAMESPACE}/{name_of(unused)}"]
    assert writes(recorded) == [("DELETE", templates_path(NAMESPACE, name_of(unused)))]


def test_the_sweeper_asks_every_kind_in_cores_table_that_holds_pod_templates_and_no_other(
    recorded: RecordingApi,
) -> None:
    serve_templates(recorded, stored(ours(), created_ago=7200))
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(ours())), 200, DELETED)
    sweeper(recorded).sweep_once()
    asked = {c.path for c in recorded.calls if c.method == "GET" and c.path != ALL_TEMPLATES}
    assert asked == {list_path(kind) for kind in REFERRERS}
    assert all(kind.resource != "podgroups" for kind in REFERRERS)


def test_a_template_younger_than_the_grace_is_kept_without_looking_for_referrers(
    recorded: RecordingApi,
) -> None:
    serve_templates(recorded, stored(ours(), created_ago=GRACE_S - 1))
    assert sweeper(recorded).sweep_once() == []
    assert [c.path for c in recorded.calls] == [ALL_TEMPLATES]


def test_a_template_created_long_ago_but_stamped_within_the_grace_is_kept(
    recorded: RecordingApi,
) -> None:
    serve_templates(recorded, stored(ours(), created_ago=86400, stamped_ago=GRACE_S - 1))
    assert sweeper(recorded).sweep_once() == []
    assert writes(recorded) == []


@pytest.mark.parametrize(
    "status", [409, 404], ids=["touched since it was listed", "gone since it was listed"]
)
def test_a_template_that_cannot_be_deleted_as_listed_is_no_error(
    recorded: RecordingApi, status: int
) -> None:
    raced, plain = ours("1Gi"), ours("2Gi")
    serve_templates(recorded, *(stored(t, created_ago=7200) for t in (raced, plain)))
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(raced)), status, {"code": status})
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(plain)), 200, DELETED)
    assert sweeper(recorded).sweep_once() == [f"{NAMESPACE}/{name_of(plain)}"]
    assert len(recorded.made("DELETE")) == 2


def test_a_referrer_list_it_may_not_read_stops_the_pass_before_any_delete(
    recorded: RecordingApi,
) -> None:
    serve_templates(recorded, stored(ours(), created_ago=7200))
    recorded.answer("GET", f"/api/v1/namespaces/{NAMESPACE}/pods", 403, {"code": 403})
    with pytest.raises(KubeError, match="HTTP 403"):
        sweeper(recorded).sweep_once()
    assert writes(recorded) == []


@pytest.mark.parametrize("text", ["yesterday", "2026-06-01T11:00:00.5Z", ""])
def test_a_stamp_that_is_no_timestamp_counts_as_none_and_stops_no_sweep(
    recorded: RecordingApi, text: str
) -> None:
    """A tenant may edit the annotation on a template in its namespace: a stamp we cannot read
    leaves the creation time to decide, and the sweep goes on for every namespace."""
    edited = stored(ours("1Gi"), created_ago=7200)
    edited["metadata"]["annotations"] = {LAST_ADMITTED: text}
    other = stored(ours("2Gi"), created_ago=7200)
    other["metadata"] = {**other["metadata"], "namespace": "team-b"}
    recorded.answer("GET", ALL_TEMPLATES, 200, {"items": [edited, other]})
    for template in (edited, other):
        path = templates_path(template["metadata"]["namespace"], name_of(template))
        recorded.answer("DELETE", path, 200, DELETED)
    assert sweeper(recorded).sweep_once() == [
        f"{NAMESPACE}/{name_of(edited)}",
        f"team-b/{name_of(other)}",
    ]
    index = TemplateIndex(recorded.api)
    index.replace([edited])
    assert index.count(NAMESPACE) == 1
