"""Prepare against claims as the API server holds them: each bad claim gets its own clear error
and leaves nothing behind, good claims in the same call are prepared, and a corrupt checkpoint
is rebuilt from the API when the agent restarts."""

from __future__ import annotations

import json

import grpc
import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.node.claims import allocated_claim, result
from e2e.node.conftest import AgentOnNode
from e2e.pods import claim_of, create_pod, create_share_template, running_pod
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc

pytestmark = pytest.mark.e2e


def _prepare(agent_on_node: AgentOnNode, *claims: Json) -> dict[str, str]:
    """Errors by claim name ("" = prepared)."""
    request = dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[
            dra_v1_pb2.Claim(
                namespace=c["metadata"]["namespace"],
                name=c["metadata"]["name"],
                uid=c["metadata"]["uid"],
            )
            for c in claims
        ]
    )
    with grpc.insecure_channel(f"unix:{agent_on_node.agent.dra_socket}") as channel:
        response = dra_v1_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=45)
    names = {c["metadata"]["uid"]: c["metadata"]["name"] for c in claims}
    return {names[uid]: answer.error for uid, answer in response.claims.items()}


def test_each_bad_claim_gets_its_own_reason_and_good_ones_are_prepared(
    kube: KubeClient, namespace: str, agent_on_node: AgentOnNode
) -> None:
    node = agent_on_node.node
    unknown, unsized = result(node, "gpu-9"), result(node, memory=None, cores=None)
    foreign = result(node, driver="gpu.example.com")
    claims = [
        allocated_claim(kube, namespace, "good", node=node),
        allocated_claim(kube, namespace, "unallocated", node=node, allocate=False),
        allocated_claim(
            kube, namespace, "elsewhere", node="other-node", results=[result("other-node")]
        ),
        allocated_claim(kube, namespace, "unknown-device", node=node, results=[unknown]),
        allocated_claim(kube, namespace, "no-size", node=node, results=[unsized]),
        allocated_claim(kube, namespace, "other-driver", node=node, results=[foreign]),
    ]
    gone = {
        "metadata": {
            "namespace": namespace,
            "name": "deleted",
            "uid": "00000000-0000-4000-8000-00000000901e",
        }
    }
    replaced = {
        **claims[0],
        "metadata": {**claims[0]["metadata"], "uid": "00000000-0000-4000-8000-0000000001d0"},
    }
    replaced["metadata"]["name"] = "good"
    errors = _prepare(agent_on_node, *claims, gone)
    assert errors["good"] == ""
    assert "is not allocated" in errors["unallocated"]
    assert "allocated to node ['other-node'], not " + node in errors["elsewhere"]
    assert "device 'gpu-9' is not a GPU of this node" in errors["unknown-device"]
    assert "no consumedCapacity[memory]" in errors["no-size"]
    assert "has no device of driver gpu.vgpu-bridge.io" in errors["other-driver"]
    assert "not found" in errors["deleted"]
    layout = agent_on_node.agent.layout
    written = {p.name for p in layout.cdi_dir.iterdir()}
    assert layout.spec_path(claims[0]["metadata"]["uid"]).name in written
    for bad in claims[1:]:
        assert layout.spec_path(bad["metadata"]["uid"]).name not in written
        assert not layout.shared_dir(bad["metadata"]["uid"]).exists()
    assert "replaced" in _prepare_replaced(agent_on_node, replaced)


def _prepare_replaced(agent_on_node: AgentOnNode, claim: Json) -> str:
    """A claim deleted and re-created under the same name has a new uid: the old one is refused."""
    return next(iter(_prepare(agent_on_node, claim).values()))


def test_a_corrupt_checkpoint_is_rebuilt_from_the_api_on_restart(
    kube: KubeClient, namespace: str, agent_on_node: AgentOnNode
) -> None:
    create_share_template(kube, namespace, "survivor", device_class=DEFAULT.device_class,
                          capacity={"memory": "5Gi", "cores": "25"})  # fmt: skip
    create_pod(kube, namespace, "survivor", template="survivor", node=agent_on_node.node)
    claim = claim_of(kube, namespace, running_pod(kube, namespace, "survivor"))
    agent, uid = agent_on_node.agent, claim["metadata"]["uid"]
    before = json.loads(agent.layout.spec_path(uid).read_text())

    assert agent.stop() == 0  # SIGTERM: a clean exit that takes its sockets along
    assert not agent.dra_socket.exists()
    assert not agent.registration_socket.exists()
    checkpoint = agent.dra_socket.parent / "checkpoint.json"
    checkpoint.write_text(checkpoint.read_text()[:-30])  # torn by a bad disk, say
    agent.layout.spec_path(uid).unlink()
    agent.start()

    assert json.loads(agent.layout.spec_path(uid).read_text()) == before
    assert list(agent.dra_socket.parent.glob("checkpoint.json.corrupt-*"))
    assert _prepare(agent_on_node, claim) == {claim["metadata"]["name"]: ""}
    assert '"checkpoint corrupt; rebuilding from the API"' in agent.log()
