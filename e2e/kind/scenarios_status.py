"""`kubectl vgpu status` on the kind cluster (``make e2e-kind`` collects this file after
``scenarios.py``; run only against kind's kubeconfig): the tier's own kubectl finds the plugin
``kubectl-vgpu`` on PATH, the view matches the claims' allocations and the agents' published
cards, the memory a CUDA process uses under libvgpu comes from the agent's /metrics through the
API server's pod proxy, and a ServiceAccount with a namespace Role sees its namespace only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kind.cluster import NAMESPACE as CHART_NAMESPACE
from e2e.kind.cluster import Kind, install
from e2e.kind.scenarios import (  # the fixtures and helpers of the kind scenarios
    CHUNK_MIB,
    api,
    create,
    cuda_pod,
    kind,
    namespace,
    share_pod,
    wait_running,
    workers,
)
from e2e.status_checks import shown_as_allocated
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi

pytestmark = pytest.mark.e2e
__all__ = ["api", "kind", "namespace", "workers"]  # fixtures, used by name
Json = dict[str, Any]
RESOURCE = "/apis/resource.k8s.io/v1"
MiB = 2**20


@pytest.fixture(scope="module", autouse=True)
def chart(kind: Kind) -> None:
    """The chart installed (``scenarios.py`` ends by uninstalling it): helm upgrade --install."""
    install(kind)


def kubectl_vgpu(kind: Kind, *args: str, kubeconfig: Path | None = None) -> str:
    """``kubectl vgpu status …`` through the tier's kubectl, our plugin first on PATH."""
    done = run_kubectl_vgpu(kind, *args, kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_kubectl_vgpu(
    kind: Kind, *args: str, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    plugin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{plugin_dir}:{os.environ.get('PATH', '')}"}
    kubectl, default_config = kind.kubectl
    config = f"--kubeconfig={kubeconfig}" if kubeconfig else default_config
    return subprocess.run(
        [kubectl, "vgpu", "status", config, *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def status_document(kind: Kind, *args: str, kubeconfig: Path | None = None) -> Json:
    found: Json = json.loads(kubectl_vgpu(kind, *args, "-o", "json", kubeconfig=kubeconfig))
    return found


def claims_by_pod(api: KubeApi, namespace: str) -> dict[str, Json]:
    items = api.list(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")["items"]
    return {claim["metadata"]["ownerReferences"][0]["name"]: claim for claim in items}


def test_kubectl_vgpu_status_shows_each_share_on_the_card_it_was_allocated(
    kind: Kind, api: KubeApi, namespace: str, workers: list[str]
) -> None:
    for name, mib in (("status-small", 1000), ("status-large", 3000)):
        create(api, namespace, share_pod(name, gpumem=mib, node=workers[0]))
    for name in ("status-small", "status-large"):
        wait_running(api, namespace, name)
    document = status_document(kind, "-A")
    cards = {(c["node"], c["device"]) for c in document["cards"]}
    slices = api.list(f"{RESOURCE}/resourceslices", fieldSelector=f"spec.driver={DEFAULT.driver}")
    published = {(s["spec"]["pool"]["name"], d["name"]) for s in slices["items"]
                 for d in s["spec"].get("devices") or ()}  # fmt: skip
    assert cards == published
    for shown in shown_as_allocated(document, claims_by_pod(api, namespace)).values():
        assert shown.share["namespace"] == namespace
        assert shown.card["freeMemory"] == shown.card["memory"] - shown.card["bookedMemory"]
    assert document["notes"] == []


def test_the_memory_a_cuda_process_uses_comes_from_its_agent_through_the_pod_proxy(
    kind: Kind, api: KubeApi, namespace: str, workers: list[str]
) -> None:
    """The CUDA pod allocates 50 MiB chunks until libvgpu refuses past its 1000 MiB share, then
    holds them: the agent reads the claim's shared region."""
    create(api, namespace, cuda_pod("status-cuda", workers[1], 1000))
    wait_running(api, namespace, "status-cuda")

    views: list[Json] = []

    def used_memory() -> int | None:
        document = status_document(kind, "-n", namespace)
        views.append(document)
        (share,) = [s for c in document["cards"] for s in c["shares"] if s["pod"] == "status-cuda"]
        value: int | None = share["usedMemory"]
        return value if value else None

    try:
        held = wait_for(used_memory, timeout_s=120, what="used memory shown", interval_s=2)
    except AssertionError as error:
        raise AssertionError(f"{error}; the last view: {json.dumps(views[-1:])}") from None
    assert (1000 - CHUNK_MIB) * MiB < held <= 1000 * MiB
    table = kubectl_vgpu(kind, "-n", namespace)
    (row,) = [line for line in table.splitlines() if f"{namespace}/status-cuda" in line]
    used, sm_utilisation = row.split()[-2:]
    assert used.endswith("Mi")
    assert sm_utilisation.isdigit()  # what libvgpu last measured (the fake NVML's number)


def viewer_kubeconfig(kind: Kind, api: KubeApi, namespace: str, directory: Path) -> Path:
    """A kubeconfig of a ServiceAccount whose Role reads pods and claims of `namespace` only."""
    base = f"/api/v1/namespaces/{namespace}"
    api.create(f"{base}/serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                           "metadata": {"name": "viewer"}})  # fmt: skip
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    rules = [{"apiGroups": ["", "resource.k8s.io"], "resources": ["pods", "resourceclaims"],
              "verbs": ["get", "list", "watch"]}]  # fmt: skip
    api.create(f"{rbac}/roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                 "metadata": {"name": "viewer"}, "rules": rules})  # fmt: skip
    api.create(f"{rbac}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}],
    })  # fmt: skip
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 3600}}  # fmt: skip
    token = api.create(f"{base}/serviceaccounts/viewer/token", request)["status"]["token"]
    config = yaml.safe_load(kind.kubeconfig.read_text())
    config["users"] = [{"name": "viewer", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "viewer"
    path = directory / "viewer-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def other_namespace(api: KubeApi) -> Iterator[str]:
    name = f"{CHART_NAMESPACE}-status-other"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": name}})  # fmt: skip
    yield name
    api.delete(f"/api/v1/namespaces/{name}")


def test_a_namespace_user_sees_its_namespaces_shares_only(
    kind: Kind,
    api: KubeApi,
    namespace: str,
    other_namespace: str,
    workers: list[str],
    tmp_path: Path,
) -> None:
    create(api, namespace, share_pod("mine", node=workers[0]))
    create(api, other_namespace, share_pod("theirs", node=workers[0]))
    for where, name in ((namespace, "mine"), (other_namespace, "theirs")):
        wait_running(api, where, name)
    kubeconfig = viewer_kubeconfig(kind, api, namespace, tmp_path)
    document = wait_for(  # the Role reaches the authorizer a moment after it is made
        lambda: _viewer_document(kind, namespace, kubeconfig), what="the viewer's Role in effect"
    )
    assert [s["pod"] for s in document["unplacedShares"]] == ["mine"]
    assert document["cards"] == []
    assert "ResourceSlices (cards): forbidden for this user, not shown" in document["notes"]
    refused = run_kubectl_vgpu(kind, "-n", other_namespace, kubeconfig=kubeconfig)
    assert refused.returncode == 1
    assert "HTTP 403" in refused.stderr


def _viewer_document(kind: Kind, namespace: str, kubeconfig: Path) -> Json | None:
    try:
        return status_document(kind, "-n", namespace, kubeconfig=kubeconfig)
    except AssertionError:  # still forbidden
        return None
