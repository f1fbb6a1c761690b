"""`kubectl-vgpu status` (the binary `kubectl vgpu status` runs) against the real API server and
kube-scheduler: the agent's mock cards (`agent_on_node`: an H100 80Gi and an A100 40Gi), HAMi
pods translated by core as the webhook admits them, placed by the scheduler and prepared by the
agent through the kubelet stand-in. What the view shows is checked against the claims'
allocations, a pod that fits nowhere is shown pending with the scheduler's own message, and a
ServiceAccount with a namespace Role sees its namespace's shares and nothing else.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster import KubeClient, LocalCluster
from e2e.node.conftest import AgentOnNode
from e2e.pods import RESOURCE, create_hami_pod, running_pod, unschedulable_condition
from e2e.status_checks import card_of, shown_as_allocated
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.core.quantity import parse_quantity

pytestmark = pytest.mark.e2e
Json = dict[str, Any]
PLUGIN = Path(sys.executable).with_name("kubectl-vgpu")
#: name -> HAMi limits; the scheduler packs them on the agent's two cards
PACKED = {
    "infer-a": {"gpumem": "30000", "gpucores": "30", "priority": "0"},
    "infer-b": {"gpumem": "40000", "gpucores": "50"},
    "train": {"gpumem": "20000", "gpucores": "40", "priority": "1"},
}
TOO_BIG = {"gpumem": "60000", "gpucores": "10"}  # more than either card has left


def status(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    return subprocess.run(
        [str(PLUGIN), "status", *args],
        env=env, capture_output=True, text=True, timeout=120, check=check,
    )  # fmt: skip


def status_document(kubeconfig: Path, *args: str) -> Json:
    document: Json = json.loads(status(kubeconfig, *args, "-o", "json").stdout)
    return document


@pytest.fixture
def other_namespace(kube: KubeClient) -> Iterator[str]:
    name = f"status-other-{secrets.token_hex(3)}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": name}})  # fmt: skip
    yield name
    for pod in kube.items(f"/api/v1/namespaces/{name}/pods"):
        kube.delete(f"/api/v1/namespaces/{name}/pods/{pod['metadata']['name']}", grace_period_s=0)
    kube.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def packed(
    kube: KubeClient, namespace: str, other_namespace: str, agent_on_node: AgentOnNode
) -> dict[str, Json]:
    """The packed pods running (one in the other namespace), the too-big one pending: the claims
    by pod name."""
    for name, limits in PACKED.items():
        create_hami_pod(kube, namespace, name, DEFAULT, gpu="1", **limits)
        running_pod(kube, namespace, name, timeout_s=90)  # one at a time: a fixed packing
    create_hami_pod(
        kube, other_namespace, "neighbour", DEFAULT, gpu="1", gpumem="1000", gpucores="5"
    )
    running_pod(kube, other_namespace, "neighbour", timeout_s=90)
    create_hami_pod(kube, namespace, "too-big", DEFAULT, gpu="1", **TOO_BIG)
    wait_for(lambda: unschedulable_condition(kube, namespace, "too-big"), what="too-big pending")
    claims: dict[str, Json] = {}
    for where in (namespace, other_namespace):
        for claim in kube.items(f"{RESOURCE}/namespaces/{where}/resourceclaims"):
            claims[claim["metadata"]["ownerReferences"][0]["name"]] = claim
    return claims


def test_status_shows_each_share_on_the_card_its_claim_was_allocated(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    namespace: str,
    agent_on_node: AgentOnNode,
    packed: dict[str, Json],
) -> None:
    document = status_document(e2e_cluster.kubeconfig, "-A")
    node = agent_on_node.node
    placed = {**PACKED, "neighbour": {"gpumem": "1000", "gpucores": "5"}}
    shown = shown_as_allocated(document, {pod: packed[pod] for pod in placed})
    for pod, limits in placed.items():
        share, consumed = shown[pod].share, shown[pod].result["consumedCapacity"]
        assert share["containers"] == ["main"]
        assert share["memory"] == int(limits["gpumem"]) * 2**20
        assert share["cores"] == parse_quantity(consumed["cores"]) == int(limits["gpucores"])
        assert share["priority"] == (int(limits["priority"]) if "priority" in limits else None)
    for device, gpu in zip(("gpu-0", "gpu-1"), ("80Gi", "40Gi"), strict=True):
        card = card_of(document, node, device)
        booked = [s["memory"] for s in card["shares"]]
        assert card["memory"] == parse_quantity(gpu)
        assert card["freeMemory"] == card["memory"] - sum(booked)
        assert card["freeCores"] == 100 - sum(s["cores"] for s in card["shares"])
    products = {c["device"]: c["product"] for c in document["cards"] if c["node"] == node}
    assert products == {"gpu-0": "NVIDIA H100 80GB HBM3", "gpu-1": "NVIDIA A100-PCIE-40GB"}


def test_a_pod_that_fits_nowhere_is_pending_with_the_schedulers_reason(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, packed: dict[str, Json]
) -> None:
    condition = unschedulable_condition(kube, namespace, "too-big")
    assert condition is not None
    document = status_document(e2e_cluster.kubeconfig, "-n", namespace)
    (pending,) = document["pending"]
    assert (pending["pod"], pending["scheduler"]) == ("too-big", "default-scheduler")
    assert pending["reason"] == condition["message"]
    table = status(e2e_cluster.kubeconfig, "-n", namespace).stdout
    assert f"{namespace}/too-big" in table
    assert "default-scheduler" in table


def test_the_table_lists_cards_shares_and_pending_pods(
    e2e_cluster: LocalCluster, namespace: str, agent_on_node: AgentOnNode, packed: dict[str, Json]
) -> None:
    lines = status(e2e_cluster.kubeconfig, "-n", namespace, "-o", "wide").stdout.splitlines()
    card_rows = [line.split() for line in lines if line.startswith(agent_on_node.node)]
    assert card_rows[0][1:5] == ["gpu-0", "GPU-agent-0000", "NVIDIA", "H100"]
    share = next(line for line in lines if f"{namespace}/infer-a" in line)
    # memory, cores, priority, used, SM%: no agent pod here to read (the agent is a process)
    assert share.split()[6:] == ["30000Mi", "30", "0", "-", "-"]


def late_shown(lines: Iterator[str], what: str, *, frames: int) -> bool:
    """Whether `what` shows in one of the next `frames` views that `--watch` prints."""
    seen = 0
    for line in lines:
        if what in line:
            return True
        seen += line.startswith("--- ")
        if seen >= frames:
            return False
    return False


def viewer_kubeconfig(
    kube: KubeClient, cluster: LocalCluster, namespace: str, directory: Path
) -> Path:
    """A kubeconfig with two contexts, the admin's (current) and `viewer`: a ServiceAccount of
    `namespace` whose Role reads only pods and resource claims there (a token from the API)."""
    base = f"/api/v1/namespaces/{namespace}"
    kube.create(f"{base}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                            "metadata": {"name": "viewer"}})  # fmt: skip
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"],
         "verbs": ["get", "list", "watch"]},
    ]  # fmt: skip
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    kube.create(f"{rbac}/roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                  "metadata": {"name": "viewer"}, "rules": rules})  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}],
    }  # fmt: skip
    kube.create(f"{rbac}/rolebindings", binding)
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 3600}}  # fmt: skip
    token = kube.create(f"{base}/serviceaccounts/viewer/token", request)["status"]["token"]
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"].append({"name": "viewer", "user": {"token": token}})
    cluster_name = config["clusters"][0]["name"]
    config["contexts"].append({"name": "viewer",
                               "context": {"cluster": cluster_name, "user": "viewer"}})  # fmt: skip
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_namespace_user_sees_its_namespaces_shares_and_nothing_else(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    namespace: str,
    other_namespace: str,
    packed: dict[str, Json],
    tmp_path: Path,
) -> None:
    kubeconfig = viewer_kubeconfig(kube, e2e_cluster, namespace, tmp_path)
    wait_for(  # the Role reaches the authorizer's cache a moment after it is created
        lambda: (
            status(kubeconfig, "--context", "viewer", "-n", namespace, check=False).returncode == 0
        ),
        what="the viewer's Role in effect",
    )
    document = status_document(kubeconfig, "--context", "viewer", "-n", namespace)
    assert document["cards"] == []
    shown = {share["pod"] for share in document["unplacedShares"]}
    assert shown == set(PACKED)
    assert [p["pod"] for p in document["pending"]] == ["too-big"]
    assert "ResourceSlices (cards): forbidden for this user, not shown" in document["notes"]
    assert (
        "the agents' metrics (live usage): forbidden for this user, not shown"
        in (document["notes"])
    )
    for elsewhere in (["-n", other_namespace], ["-A"]):
        refused = status(kubeconfig, "--context", "viewer", *elsewhere, check=False)
        assert refused.returncode == 1
        assert refused.stdout == ""
        assert "HTTP 403" in refused.stderr
        assert "resourceclaims" in refused.stderr


def test_watch_prints_the_view_again_with_each_change(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, agent_on_node: AgentOnNode
) -> None:
    env = {**os.environ, "KUBECONFIG": str(e2e_cluster.kubeconfig)}
    command = [str(PLUGIN), "status", "-n", namespace, "--watch", "--interval", "0.5"]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as watching:
        assert watching.stdout is not None
        try:
            first = watching.stdout.readline()
            assert first.startswith("--- ")
            create_hami_pod(kube, namespace, "late", DEFAULT, gpu="1", gpumem="2000", gpucores="10")
            running_pod(kube, namespace, "late", timeout_s=90)
            assert late_shown(watching.stdout, f"{namespace}/late", frames=240)
        finally:
            watching.terminate()


def allocated(claim: Json) -> Json | None:
    """The one device result of an allocated claim, or None."""
    allocation = claim["status"].get("allocation")
    return allocation["devices"]["results"][0] if allocation else None


def test_with_a_namespace_an_admin_sees_its_shares_and_every_namespaces_booking(
    e2e_cluster: LocalCluster,
    namespace: str,
    agent_on_node: AgentOnNode,
    packed: dict[str, Json],
) -> None:
    # the agent is a process here, no pod: named, as no configuration of ours says where it runs
    document = status_document(e2e_cluster.kubeconfig, "-n", namespace, "--agent-namespace",
                               namespace)  # fmt: skip
    neighbour = allocated(packed["neighbour"])
    assert neighbour is not None
    card = card_of(document, agent_on_node.node, neighbour["device"])
    assert "neighbour" not in {share["pod"] for share in card["shares"]}
    results = [r for r in map(allocated, packed.values()) if r is not None]
    on_card = [r for r in results if r["device"] == neighbour["device"]]
    assert card["bookedMemory"] == sum(
        parse_quantity(r["consumedCapacity"]["memory"]) for r in on_card
    )
    assert document["notes"] == []
