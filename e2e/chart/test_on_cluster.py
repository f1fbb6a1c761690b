"""The rendered chart on the local control plane: every object passes the API server's validation
and admission (server-side apply, dry run), the RBAC is least privilege (access reviews), and the
ValidatingAdmissionPolicy keeps an agent to its own node's ResourceSlices (real requests, made
as the agent's service account on a node)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e.chart.cluster_api import Discovery, Identity, allowed, request_as, server_side_apply
from e2e.chart.rendering import Helm, Json, of_kind
from e2e.cluster import KubeClient
from e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
DRIVER = "gpu.vgpu-bridge.io"
EVERYTHING_ON: dict[str, Any] = {
    "webhook": {"gpuObjectsOnly": True},
    "volcano": {"enabled": True, "version": "v1.15.1"},
    "kai": {"enabled": True, "version": "v0.18.0"},
    "agent": {"mockGpus": [{"uuid": "GPU-0", "productName": "NVIDIA H100", "memory": "80Gi"}]},
    "metrics": {"service": {"type": "NodePort"}},
}
#: Kinds whose APIs the local control plane does not serve (cert-manager's CRDs).
NOT_SERVED_HERE = {"Certificate", "Issuer"}


def release_name() -> str:
    return f"vb-{secrets.token_hex(3)}"


@pytest.mark.parametrize("values", [{}, EVERYTHING_ON], ids=["defaults", "everything-on"])
def test_every_rendered_object_passes_server_side_dry_run(
    helm: Helm, kube: KubeClient, discovery: Discovery, namespace: str, values: dict[str, Any]
) -> None:
    objects = helm.template(values, release=release_name(), namespace=namespace)
    refused = {}
    for obj in objects:
        try:
            server_side_apply(kube, discovery.path(obj), obj, dry_run=True)
        except Exception as error:  # collected: one report names every refused object
            refused[f"{obj['kind']}/{obj['metadata']['name']}"] = str(error)
    assert not refused, refused
    assert len(objects) >= 14


def test_cert_manager_objects_are_the_only_ones_this_cluster_cannot_check(
    helm: Helm, discovery: Discovery, namespace: str
) -> None:
    objects = helm.template({"tls": {"mode": "cert-manager"}}, namespace=namespace)
    unserved = {obj["kind"] for obj in objects if not discovery.served(obj)}
    assert unserved == NOT_SERVED_HERE


@pytest.fixture
def installed_rbac(
    helm: Helm, kube: KubeClient, discovery: Discovery, namespace: str
) -> Iterator[dict[str, str]]:
    """The chart's service accounts, roles, bindings and policy, created for real."""
    release = release_name()
    objects = helm.template(release=release, namespace=namespace)
    kinds = {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    }  # fmt: skip
    wanted = [obj for obj in objects if obj["kind"] in kinds]
    paths = [discovery.path(obj) for obj in wanted]
    for path, obj in zip(paths, wanted, strict=True):
        server_side_apply(kube, path, obj, dry_run=False)
    accounts = {obj["metadata"]["name"] for obj in of_kind(objects, "ServiceAccount")}
    yield {
        "namespace": namespace,
        "agent": next(name for name in accounts if name.endswith("-agent")),
        "webhook": next(name for name in accounts if name.endswith("-webhook")),
        "status_viewer": next(
            obj["metadata"]["name"]
            for obj in of_kind(objects, "ClusterRole")
            if obj["metadata"]["name"].endswith("-status-viewer")
        ),
        "webhook_service": next(
            obj["metadata"]["name"]
            for obj in of_kind(objects, "Service")
            if obj["metadata"]["labels"].get("app.kubernetes.io/component") == "webhook"
        ),
    }
    for path in reversed(paths):
        kube.delete(path)


def a_slice(node: str, *, driver: str = DRIVER) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"chart-test-{node}-{secrets.token_hex(3)}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def create_slice_as(kube: KubeClient, identity: Identity, body: Json) -> tuple[int, Json]:
    return request_as(kube, identity, "POST", SLICES, body=body, query={"dryRun": "All"})


def test_agent_writes_its_own_nodes_slices_and_no_other_nodes(
    kube: KubeClient, fake_nodes: list[str], installed_rbac: dict[str, str]
) -> None:
    mine, other = fake_nodes
    agent = Identity.service_account(
        installed_rbac["namespace"], installed_rbac["agent"], node=mine
    )

    def refused_for_other_node() -> Json | None:
        status, body = create_slice_as(kube, agent, a_slice(other))
        return body if status in (403, 422) else None

    # the policy reaches the API server's admission through an informer: wait for it to bite
    refusal = wait_for(refused_for_other_node, timeout_s=30, what="the slice policy to apply")
    assert refusal["code"] == 403
    assert refusal["message"].endswith(
        f"the agent on node {mine} may write only that node's ResourceSlices, "
        f'not one for node "{other}"'
    )
    status, body = create_slice_as(kube, agent, a_slice(mine))
    assert status == 201, body
    status, body = create_slice_as(kube, agent, a_slice(mine, driver="other.example.com"))
    assert status in (403, 422), body
    assert (
        "only ResourceSlices of driver gpu.vgpu-bridge.io, not other.example.com" in body["message"]
    )


def test_agent_without_a_node_bound_token_writes_no_slice(
    kube: KubeClient, fake_nodes: list[str], installed_rbac: dict[str, str]
) -> None:
    agent = Identity.service_account(installed_rbac["namespace"], installed_rbac["agent"])

    def refused() -> Json | None:
        status, body = create_slice_as(kube, agent, a_slice(fake_nodes[0]))
        return body if status in (403, 422) else None

    refusal = wait_for(refused, timeout_s=30, what="the slice policy to apply")
    assert "the agent's token names no node" in refusal["message"]


ACCESS = [
    # (service account, verb, group, resource, subresource, allowed)
    ("agent", "create", "resource.k8s.io", "resourceslices", "", True),
    ("agent", "delete", "resource.k8s.io", "resourceslices", "", True),
    ("agent", "get", "resource.k8s.io", "resourceclaims", "", True),
    ("agent", "update", "resource.k8s.io", "resourceclaims", "", False),
    ("agent", "update", "resource.k8s.io", "resourceclaims", "status", False),
    ("agent", "get", "", "nodes", "", True),
    ("agent", "update", "", "nodes", "", False),
    ("agent", "get", "", "secrets", "", False),
    ("agent", "list", "", "pods", "", False),
    ("webhook", "create", "resource.k8s.io", "resourceclaimtemplates", "", True),
    ("webhook", "delete", "resource.k8s.io", "resourceclaimtemplates", "", True),
    ("webhook", "watch", "resource.k8s.io", "resourceclaimtemplates", "", True),
    ("webhook", "create", "resource.k8s.io", "resourceclaims", "", False),
    ("webhook", "watch", "resource.k8s.io", "resourceslices", "", True),
    ("webhook", "create", "resource.k8s.io", "resourceslices", "", False),
    ("webhook", "list", "batch.volcano.sh", "jobs", "", True),
    ("webhook", "list", "apps", "deployments", "", True),
    ("webhook", "update", "apps", "deployments", "", False),
    ("webhook", "get", "", "secrets", "", False),
    ("webhook", "create", "events.k8s.io", "events", "", True),
    ("webhook", "patch", "events.k8s.io", "events", "", True),
    ("webhook", "delete", "events.k8s.io", "events", "", False),
    ("webhook", "create", "", "pods", "", False),
    ("webhook", "watch", "", "pods", "", True),  # unbound whole-card pods (pending_pods.py)
]


def test_service_accounts_get_exactly_what_they_need(
    kube: KubeClient, installed_rbac: dict[str, str]
) -> None:
    wrong = []
    for account, verb, group, resource, subresource, expected in ACCESS:
        identity = Identity.service_account(installed_rbac["namespace"], installed_rbac[account])
        extra = {"subresource": subresource} if subresource else {}
        got = allowed(kube, identity, verb=verb, group=group, resource=resource, **extra)
        if got != expected:
            wrong.append((account, verb, group, resource, subresource, got))
    assert not wrong, wrong


RBAC_GROUP = "rbac.authorization.k8s.io"
STATUS_VIEWER = Identity("viewer@example.com", ("system:authenticated",))
STATUS_VIEWER_ACCESS = [
    # (verb, group, resource, subresource, in the chart's namespace, allowed, name): in names,
    # {webhook} is the webhook's Service
    ("list", "resource.k8s.io", "resourceslices", "", False, True, ""),
    ("list", "resource.k8s.io", "resourceclaims", "", False, True, ""),
    ("list", "", "pods", "", False, True, ""),
    ("list", "", "pods", "", True, True, ""),  # the agents: in the chart's namespace only
    ("get", "", "pods", "proxy", True, True, ""),
    ("get", "", "pods", "proxy", False, False, ""),
    ("list", "", "services", "", False, False, ""),  # a Service's labels are anyone's to set
    # the webhook's Service, as our configuration names it
    ("list", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", False, True, ""),
    ("get", "", "services", "", True, True, "{webhook}"),
    ("get", "", "services", "", True, False, "other"),
    ("get", "", "services", "proxy", True, True, "https:{webhook}:https"),  # its /bookings
    ("get", "", "services", "proxy", True, False, "https:other:https"),
    ("get", "", "services", "proxy", False, False, "https:{webhook}:https"),
    ("create", "", "services", "proxy", True, False, "https:{webhook}:https"),  # no /mutate
    ("create", "resource.k8s.io", "resourceclaims", "", False, False, ""),
    ("delete", "", "pods", "", True, False, ""),
    ("get", "", "secrets", "", True, False, ""),
]


def test_status_viewer_roles_grant_what_kubectl_vgpu_status_reads_and_no_more(
    kube: KubeClient, installed_rbac: dict[str, str]
) -> None:
    namespace = installed_rbac["namespace"]
    role = installed_rbac["status_viewer"]
    subjects = [{"kind": "User", "name": STATUS_VIEWER.user, "apiGroup": RBAC_GROUP}]
    bindings = [
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {"kind": "ClusterRole", "name": role},
        ),
        (
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
            {"kind": "Role", "name": role},
        ),
    ]
    for path, ref in bindings:
        binding = {"metadata": {"name": f"{role}-test"}, "roleRef": {**ref, "apiGroup": RBAC_GROUP}}
        kube.create(path, {**binding, "subjects": subjects})
    try:

        def wrong_access() -> list[tuple[str, ...]] | None:
            wrong: list[tuple[str, ...]] = []
            for verb, group, resource, subresource, here, expected, name in STATUS_VIEWER_ACCESS:
                where = {"namespace": namespace if here else "default"}
                extra = {"subresource": subresource} if subresource else {}
                if name:
                    extra["name"] = name.format(webhook=installed_rbac["webhook_service"])
                got = allowed(
                    kube, STATUS_VIEWER, verb=verb, group=group, resource=resource, **where, **extra
                )
                if got != expected:
                    wrong.append((verb, resource, subresource, name, str(here), str(got)))
            return wrong or None

        # the authorizer sees new bindings through an informer: wait until it answers as expected
        wrong = wait_for_none(wrong_access, timeout_s=30)
        assert wrong is None, wrong
    finally:
        for path, _ in bindings:
            kube.delete(f"{path}/{role}-test")


def wait_for_none(
    check: Callable[[], list[tuple[str, ...]] | None], *, timeout_s: float
) -> list[tuple[str, ...]] | None:
    """Poll ``check`` until it returns None or the time is up; its last answer."""
    deadline = time.monotonic() + timeout_s
    while (answer := check()) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    return answer
