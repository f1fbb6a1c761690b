"""What the admission-policy tests (ours and the nvidiaEnforced ones) create: namespaces, claims
and claim templates of given requests, each made as a server-side dry run by a chosen identity."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from e2e.chart.cluster_api import Discovery, Identity, request_as, server_side_apply
from e2e.chart.rendering import Json
from e2e.cluster import KubeClient

RESOURCE = "/apis/resource.k8s.io/v1"
ADMIN = Identity("admin", ("system:masters", "system:authenticated"))
SCHEDULER = Identity("system:kube-scheduler", ("system:authenticated",))
POLICY_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def make_namespace(kube: KubeClient, prefix: str, labels: dict[str, str] | None = None) -> str:
    name = f"{prefix}-{secrets.token_hex(3)}"
    metadata: Json = {"name": name, "labels": labels or {}}
    kube.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    )
    return name


def claim_asking(*requests: Json) -> Json:
    """A ResourceClaim (a fresh name) of `requests`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{secrets.token_hex(3)}"},
        "spec": {"devices": {"requests": list(requests)}},
    }


def template_asking(*requests: Json) -> Json:
    """A ResourceClaimTemplate (a fresh name) of `requests`."""
    claim = claim_asking(*requests)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": claim["metadata"],
        "spec": {"spec": claim["spec"]},
    }


def dry_run_create(
    kube: KubeClient, namespace: str, resource: str, body: Json, *, identity: Identity = ADMIN
) -> tuple[int, Json]:
    """A server-side dry-run create of `resource` (a resource.k8s.io one, or pods); (status,
    body)."""
    path = f"{RESOURCE}/namespaces/{namespace}/{resource}"
    if resource == "pods":
        path = f"/api/v1/namespaces/{namespace}/pods"
    return request_as(kube, identity, "POST", path, body=body, query={"dryRun": "All"})


@contextmanager
def applied(kube: KubeClient, objects: list[Json]) -> Iterator[list[str]]:
    """Each of `objects` server-side applied for real while the block runs (their API paths, in
    order), then deleted again, last first."""
    discovery = Discovery(kube)
    paths = [discovery.path(obj) for obj in objects]
    for path, obj in zip(paths, objects, strict=True):
        server_side_apply(kube, path, obj, dry_run=False)
    try:
        yield paths
    finally:
        for path in reversed(paths):
            kube.delete(path)


def refusal(answer: tuple[int, Json]) -> str:
    """The message of a refused `dry_run_create` (fails the test when it was not refused)."""
    status, body = answer
    assert status in (403, 422), (status, body)
    return str(body.get("message", ""))
