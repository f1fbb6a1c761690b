"""Prepared claims whose ResourceClaim is gone (or was re-created under the same name) are
cleaned up by the agent's periodic pass, against the real API server."""

from __future__ import annotations

import pytest

from e2e.cluster import KubeClient
from e2e.node.claims import allocated_claim
from tests.integration.node_harness import agent_dirs
from tests.unit.node.claims import GPUS
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.node.state import ClaimRef, DeviceState

pytestmark = pytest.mark.e2e
CLAIMS = "/apis/resource.k8s.io/v1/namespaces"


def test_claims_deleted_or_replaced_behind_the_agents_back_are_unprepared(
    kube: KubeClient, agent_api: KubeApi, namespace: str, agent_node: str
) -> None:
    with agent_dirs() as dirs:
        state = DeviceState(agent_api, node=agent_node, profile=DEFAULT, gpus=GPUS,
                            layout=dirs.layout, checkpoint_file=dirs.checkpoint)  # fmt: skip
        state.start()
        claims = [allocated_claim(kube, namespace, f"c{i}", node=agent_node) for i in range(3)]
        refs = [ClaimRef(namespace, c["metadata"]["name"], c["metadata"]["uid"]) for c in claims]
        assert all(p.error is None for p in state.prepare(refs).values())

        kube.delete(f"{CLAIMS}/{namespace}/resourceclaims/c0")
        kube.delete(f"{CLAIMS}/{namespace}/resourceclaims/c1")
        allocated_claim(kube, namespace, "c1", node=agent_node)  # same name, new uid

        assert sorted(state.cleanup_stale()) == sorted([refs[0].uid, refs[1].uid])
        assert [c.uid for c in state.snapshot()] == [refs[2].uid]
        for ref in refs[:2]:
            assert not dirs.layout.spec_path(ref.uid).exists()
        assert dirs.layout.spec_path(refs[2].uid).exists()
        assert state.cleanup_stale() == []
