"""One driver name, renamed end to end: a webhook and a node agent both started as
`gpu.example-renamed.io` understand each other on the real control plane (kube-scheduler
allocates the translated pod's claim on the agent's slices, the agent prepares it), while a pod
the webhook translates under the old name finds nothing on the renamed node.

The renamed webhook gets the name as a flag, the agent as VGPU_BRIDGE_DRIVER_NAME (the chart's
one `driverName` value sets that env var on both); the DeviceClass is the chart's shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.client import Json
from e2e.node.conftest import AgentOnNode, device_class_present
from e2e.pods import (
    claim_of,
    get_pod,
    is_unbound,
    only_result,
    running_pod,
    unschedulable_condition,
)
from e2e.waiting import wait_for
from e2e.webhook.helpers import create_pod, gpu_pod
from e2e.webhook.process import WebhookProcess, running_webhook
from vgpu_bridge.core import DEFAULT

pytestmark = pytest.mark.e2e
RESOURCE = "/apis/resource.k8s.io/v1"
RENAMED = "gpu.example-renamed.io"
RENAMED_LABEL = "e2e.vgpu-bridge.io/renamed-driver-webhook"
OLD_NAME_LABEL = "e2e.vgpu-bridge.io/old-name-webhook"
# gpumem not a multiple of 1000: the API server would hand 3000 to the webhook as "3k"
SHARE = {
    "nvidia.com/gpu": 1,
    "nvidia.com/gpumem": 3072,
    "nvidia.com/gpucores": 30,
    "nvidia.com/priority": 0,  # travels as the driver's opaque config
}


@pytest.fixture(scope="module")
def agent_driver() -> str:
    """The module's agent and its DeviceClass (e2e/node/conftest.py) take the renamed driver."""
    return RENAMED


@contextmanager
def _webhook(
    kube: KubeClient, cluster: LocalCluster, workdir: Path, label: str, args: Sequence[str]
) -> Iterator[WebhookProcess]:
    with running_webhook(
        kube, cluster.kubeconfig, workdir, grace_s=None, namespace_label=label, extra_args=args
    ) as process:
        yield process
        print(process.log()[-4000:])  # shown by pytest for failed tests


@pytest.fixture(scope="module")
def renamed_webhook(
    kube: KubeClient, e2e_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    workdir = tmp_path_factory.mktemp("renamed-webhook")
    args = ["--driver-name", RENAMED]
    with _webhook(kube, e2e_cluster, workdir, RENAMED_LABEL, args) as process:
        yield process


@pytest.fixture(scope="module")
def old_name_webhook(
    kube: KubeClient, e2e_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    """A webhook left at the default name, and that name's DeviceClass: what the pod asks for
    exists, only no device of it is on the renamed node."""
    workdir = tmp_path_factory.mktemp("old-name-webhook")
    with (
        device_class_present(kube, DEFAULT.driver),
        _webhook(kube, e2e_cluster, workdir, OLD_NAME_LABEL, []) as process,
    ):
        yield process


def _served_by(kube: KubeClient, namespace: str, label: str) -> None:
    """Label `namespace` for the webhook registered for `label`, and wait until it translates."""
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {label: "true"}}})
    probe = gpu_pod("probe", SHARE)
    wait_for(
        lambda: "resourceClaims" in create_pod(kube, namespace, probe, dry_run=True)["spec"],
        timeout_s=20,
        what=f"the webhook for {label} to be called for the namespace",
    )


def _share_pod_on(node: str, name: str) -> Json:
    """A HAMi-style share request (3072 MiB, 30% of the SMs, high priority) for the agent's
    node only."""
    pod = gpu_pod(name, SHARE)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def _slices(kube: KubeClient, node: str, driver: str) -> list[Json]:
    selector = f"spec.nodeName={node},spec.driver={driver}"
    return kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector)


def test_the_renamed_agent_publishes_its_gpus_under_the_renamed_driver_only(
    kube: KubeClient, agent_on_node: AgentOnNode
) -> None:
    slices = wait_for(
        lambda: _slices(kube, agent_on_node.node, RENAMED) or None,
        timeout_s=20,
        what="the renamed agent's slices",
    )
    assert sorted(d["name"] for s in slices for d in s["spec"]["devices"]) == ["gpu-0", "gpu-1"]
    assert {s["spec"]["pool"]["name"] for s in slices} == {agent_on_node.node}
    assert _slices(kube, agent_on_node.node, DEFAULT.driver) == []


def test_a_pod_the_renamed_webhook_translates_is_allocated_and_prepared_on_the_renamed_node(
    kube: KubeClient,
    namespace: str,
    agent_on_node: AgentOnNode,
    renamed_webhook: WebhookProcess,
) -> None:
    _served_by(kube, namespace, RENAMED_LABEL)
    create_pod(kube, namespace, _share_pod_on(agent_on_node.node, "renamed"))
    pod = running_pod(kube, namespace, "renamed")
    claim = claim_of(kube, namespace, pod)
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == RENAMED
    assert [c["opaque"]["driver"] for c in claim["spec"]["devices"]["config"]] == [RENAMED]
    result = only_result(claim)
    assert (result["driver"], result["pool"]) == (RENAMED, agent_on_node.node)
    slices = _slices(kube, agent_on_node.node, RENAMED)
    assert result["device"] in {d["name"] for s in slices for d in s["spec"]["devices"]}

    uid = claim["metadata"]["uid"]
    layout = agent_on_node.agent.layout
    [prepared] = agent_on_node.preparer.answers[uid].devices
    assert list(prepared.cdi_device_ids) == [layout.device_id(uid, 0)]
    assert layout.device_id(uid, 0).startswith(f"k8s.{RENAMED}/")
    spec = json.loads(layout.spec_path(uid).read_text())
    assert spec["kind"] == f"k8s.{RENAMED}/claim"
    assert spec["annotations"][f"{RENAMED}/claim-uid"] == uid
    [device] = spec["devices"]
    assert device["containerEdits"]["env"] == [
        "CUDA_DEVICE_MEMORY_LIMIT_0=3072m",
        "CUDA_DEVICE_SM_LIMIT_0=30",
    ]
    assert "CUDA_TASK_PRIORITY=0" in spec["containerEdits"]["env"]


def test_a_pod_the_webhook_translates_under_the_old_name_stays_unallocated_on_the_renamed_node(
    kube: KubeClient,
    namespace: str,
    agent_on_node: AgentOnNode,
    old_name_webhook: WebhookProcess,
) -> None:
    _served_by(kube, namespace, OLD_NAME_LABEL)
    create_pod(kube, namespace, _share_pod_on(agent_on_node.node, "old-name"))
    condition = wait_for(
        lambda: unschedulable_condition(kube, namespace, "old-name"),
        timeout_s=60,
        what="kube-scheduler to find no device for the old-name pod",
    )
    assert "cannot allocate all claims" in condition["message"]
    assert is_unbound(kube, namespace, "old-name")
    claim = claim_of(kube, namespace, get_pod(kube, namespace, "old-name"))
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == DEFAULT.device_class
    assert "allocation" not in (claim.get("status") or {})
    uid = claim["metadata"]["uid"]
    assert uid not in agent_on_node.preparer.answers
    assert not agent_on_node.agent.layout.spec_path(uid).exists()
