"""The slice publisher against the real API server: what it publishes, that an unchanged
inventory writes nothing, that changes bump the pool generation, and that it repairs slices
others deleted or left behind."""

from __future__ import annotations

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.publisher import SlicePublisher
from vgpu_bridge.node.slices import build_slices

pytestmark = pytest.mark.e2e
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def _gpus(count: int, memory: int = 80 * 2**30) -> list[Gpu]:
    return [Gpu(index=i, uuid=f"GPU-agent-{i:04}", product_name="NVIDIA H100", memory=memory)
            for i in range(count)]  # fmt: skip


def _ours(kube: KubeClient, node: str) -> list[Json]:
    selector = f"spec.nodeName={node},spec.driver={DEFAULT.driver}"
    return sorted(
        kube.items(SLICES, fieldSelector=selector), key=lambda s: str(s["metadata"]["name"])
    )


def test_first_sync_publishes_the_pool_owned_by_the_node(
    kube: KubeClient, agent_api: KubeApi, agent_node: str
) -> None:
    result = SlicePublisher(agent_api, node=agent_node, profile=DEFAULT, gpus=_gpus(2)).sync()
    assert result.changed
    assert result.generation == 1
    [published] = _ours(kube, agent_node)
    node_uid = kube.get(f"/api/v1/nodes/{agent_node}")["metadata"]["uid"]
    [expected] = build_slices(
        _gpus(2), node=agent_node, profile=DEFAULT, generation=1, node_uid=node_uid
    )
    assert published["spec"] == expected["spec"]  # kept as sent: consumable capacity is on
    [owner] = published["metadata"]["ownerReferences"]
    assert owner["uid"] == node_uid
    assert owner["kind"] == "Node"


def test_an_unchanged_inventory_writes_nothing(
    kube: KubeClient, agent_api: KubeApi, agent_node: str
) -> None:
    publisher = SlicePublisher(agent_api, node=agent_node, profile=DEFAULT, gpus=_gpus(2))
    publisher.sync()
    before = [s["metadata"]["resourceVersion"] for s in _ours(kube, agent_node)]
    again = SlicePublisher(agent_api, node=agent_node, profile=DEFAULT, gpus=_gpus(2)).sync()
    assert not again.changed
    assert again.generation == 1
    assert [s["metadata"]["resourceVersion"] for s in _ours(kube, agent_node)] == before


def test_a_changed_inventory_bumps_the_generation_of_every_slice_and_drops_obsolete_ones(
    kube: KubeClient, agent_api: KubeApi, agent_node: str
) -> None:
    publisher = SlicePublisher(agent_api, node=agent_node, profile=DEFAULT, gpus=_gpus(1))
    publisher.sync()
    publisher.set_gpus(_gpus(130))
    grown = publisher.sync()
    assert (grown.generation, grown.created, grown.updated) == (2, 1, 1)
    slices = _ours(kube, agent_node)
    pools = [s["spec"]["pool"] for s in slices]
    assert pools == [{"name": agent_node, "generation": 2, "resourceSliceCount": 2}] * 2
    assert sum(len(s["spec"]["devices"]) for s in slices) == 130

    publisher.set_gpus(_gpus(1, memory=40 * 2**30))
    shrunk = publisher.sync()
    assert (shrunk.generation, shrunk.updated, shrunk.deleted) == (3, 1, 1)
    [remaining] = _ours(kube, agent_node)
    [card] = remaining["spec"]["devices"]
    assert card["capacity"]["memory"]["value"] == "40Gi"


def test_slices_deleted_by_someone_else_come_back_and_strays_of_the_pool_go(
    kube: KubeClient, agent_api: KubeApi, agent_node: str
) -> None:
    publisher = SlicePublisher(agent_api, node=agent_node, profile=DEFAULT, gpus=_gpus(2))
    publisher.sync()
    [published] = _ours(kube, agent_node)
    kube.delete(f"{SLICES}/{published['metadata']['name']}")  # as a restarting kubelet does
    stray = build_slices(_gpus(1), node=agent_node, profile=DEFAULT, generation=9)[0]
    stray["metadata"]["name"] = f"{agent_node}-left-behind"
    kube.create(SLICES, stray)
    other_pool = build_slices(_gpus(1), node=agent_node, profile=DEFAULT, generation=1)[0]
    other_pool["metadata"]["name"] = f"{agent_node}-other-pool"
    other_pool["spec"]["pool"]["name"] = f"{agent_node}-other"
    kube.create(SLICES, other_pool)

    repaired = publisher.sync()
    assert repaired.changed
    assert (repaired.generation, repaired.created, repaired.deleted) == (10, 1, 1)
    names = [s["metadata"]["name"] for s in _ours(kube, agent_node)]
    assert names == sorted([published["metadata"]["name"], f"{agent_node}-other-pool"])
    assert not publisher.sync().changed  # the other pool is not ours to change


def test_a_node_without_gpus_publishes_an_empty_pool(
    kube: KubeClient, agent_api: KubeApi, agent_node: str
) -> None:
    SlicePublisher(agent_api, node=agent_node, profile=DEFAULT, gpus=[]).sync()
    [empty] = _ours(kube, agent_node)
    assert "devices" not in empty["spec"]
    assert not SlicePublisher(agent_api, node=agent_node, profile=DEFAULT, gpus=[]).sync().changed
