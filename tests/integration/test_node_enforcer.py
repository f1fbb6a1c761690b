"""The node agent in enforcer mode (`--enforce-driver gpu.nvidia.com`, issue 37) over its real
unix-socket gRPC: claims shaped as the allocator writes them for NVIDIA-shaped slices (a share of
`gpu.nvidia.com` with shareID and consumedCapacity `{memory: 1Gi, shares: 30}`, and our enforcer
device beside it). The spec holds the container to the share by the UUID of NVIDIA's slice, gives
no card of its own, and reaches every container of the claim; Unprepare leaves nothing."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.nvidia.slices import mock_uuid
from tests.integration.node_harness import AgentDirs, RunningAgent, agent_dirs
from tests.unit.node.claims import NODE
from tests.unit.node.nvidia_claims import (
    ENFORCER_SHARE_ID,
    enforcer_config,
    enforcer_result,
    nvidia_claim,
    nvidia_result,
    nvidia_slice,
)
from vgpu_bridge.core.profiles import ENFORCER_DRIVER
from vgpu_bridge.kube import KubeApi, KubeError, Listed
from vgpu_bridge.node.app import Agent, build
from vgpu_bridge.node.cdi import LIMITS_MOUNT, PRELOAD_MOUNT, CdiLayout
from vgpu_bridge.node.kubeletapi import dra_v1_pb2
from vgpu_bridge.node.publisher import SLICES
from vgpu_bridge.node.settings import Settings

Json = dict[str, Any]
A = "0c1a1d00-0000-4000-8000-0000000037a1"
B = "0c1a1d00-0000-4000-8000-0000000037b2"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"


class NvidiaNodeApi(KubeApi):
    """An API server holding the Node, NVIDIA's slice of it, allocated claims and the slices the
    agent writes; it records every GET and LIST it is asked."""

    def __init__(self, *claims: Json, mode: str = "100") -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self.asked: list[str] = []
        self.claims = {CLAIMS.format(**c["metadata"]): c for c in claims}
        self.nvidia = [nvidia_slice(mode)]
        self.written: dict[str, Json] = {}

    def get(self, path: str) -> Json:
        self.asked.append(path)
        if path == f"/api/v1/nodes/{NODE}":
            return {"metadata": {"name": NODE, "uid": "node-uid"}}
        if path not in self.claims:
            raise KubeError("GET", path, 404, "not found")
        return copy.deepcopy(self.claims[path])

    def list_all(self, path: str, *, keep: Any = None, **query: Any) -> Listed:
        self.asked.append(f"{path}?{query.get('fieldSelector')}")
        if path == "/apis/resource.k8s.io/v1/resourceclaims":
            return Listed(copy.deepcopy(list(self.claims.values())), "1")
        assert path == SLICES
        assert query["fieldSelector"] == f"spec.nodeName={NODE},spec.driver=gpu.nvidia.com"
        items = [keep(s) if keep else s for s in copy.deepcopy(self.nvidia)]
        return Listed(items, "1")

    def list(self, path: str, **query: Any) -> Json:
        self.asked.append(f"{path}?{query.get('fieldSelector')}")
        return {"items": copy.deepcopy(list(self.written.values()))}

    def create(self, path: str, body: Json, **query: Any) -> Json:
        stored = copy.deepcopy(body)
        stored["metadata"].update(uid="slice-uid", resourceVersion="1")
        self.written[body["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    @property
    def slice_reads(self) -> int:
        return sum("spec.driver=gpu.nvidia.com" in asked for asked in self.asked)


def enforcer_settings(dirs: AgentDirs) -> Settings:
    """The agent as the chart runs it on NVIDIA's nodes: --enforce-driver, no cards of its own."""
    return Settings(node_name=NODE, enforce_driver="gpu.nvidia.com",
                    plugin_dir=dirs.root / "plugins" / ENFORCER_DRIVER,
                    registry_dir=dirs.registry, cdi_dir=dirs.root / "cdi",
                    vgpu_dir=dirs.root / "vgpu", metrics_listen="")  # fmt: skip


def layout(dirs: AgentDirs) -> CdiLayout:
    return CdiLayout(cdi_dir=dirs.root / "cdi", vgpu_dir=dirs.root / "vgpu", driver=ENFORCER_DRIVER)


@contextmanager
def enforcer_agent(dirs: AgentDirs, api: KubeApi) -> Iterator[tuple[Agent, RunningAgent]]:
    agent = build(enforcer_settings(dirs), api, gpus=())
    agent.start()
    try:
        yield agent, RunningAgent(dirs, agent.state, agent.server)
    finally:
        agent.close(grace_s=1)


def _prepare(running: RunningAgent, *claims: tuple[str, str]) -> dict[str, Any]:
    request = dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[dra_v1_pb2.Claim(namespace="team-a", name=name, uid=uid) for name, uid in claims]
    )
    return dict(running.v1().NodePrepareResources(request, timeout=30).claims)


def _unprepare(running: RunningAgent, *claims: tuple[str, str]) -> dict[str, str]:
    request = dra_v1_pb2.NodeUnprepareResourcesRequest(
        claims=[dra_v1_pb2.Claim(namespace="team-a", name=name, uid=uid) for name, uid in claims]
    )
    answer = running.v1().NodeUnprepareResources(request, timeout=30).claims
    return {uid: entry.error for uid, entry in answer.items()}


@pytest.fixture
def dirs() -> Iterator[AgentDirs]:
    with agent_dirs() as made:
        yield made


def test_a_share_of_nvidias_card_is_held_to_its_limits_by_uuid_and_unprepare_leaves_nothing(
    dirs: AgentDirs,
) -> None:
    api = NvidiaNodeApi(nvidia_claim(uid=A, name="a"))
    paths = layout(dirs)
    with enforcer_agent(dirs, api) as (_agent, running):
        answer = _prepare(running, ("a", A))[A]
        assert answer.error == ""
        assert [(d.pool_name, d.device_name, list(d.request_names), d.share_id,
                 list(d.cdi_device_ids)) for d in answer.devices] == [
            (NODE, "enforcer", [], ENFORCER_SHARE_ID, [f"k8s.{ENFORCER_DRIVER}/claim={A}-0"])
        ]  # fmt: skip
        assert paths.limits_path(A).read_text() == (
            "vgpu-bridge-limits 2\n"
            f"CUDA_DEVICE_MEMORY_LIMIT_{mock_uuid(0)}=1024m\n"
            f"CUDA_DEVICE_SM_LIMIT_{mock_uuid(0)}=30\n"
            "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/shared/vgpu.cache\n"
        )
        spec = json.loads(paths.spec_path(A).read_text())
        text = json.dumps(spec)
        assert "NVIDIA_VISIBLE_DEVICES" not in text  # NVIDIA's spec says `void`: not ours to say
        assert "deviceNodes" not in text  # NVIDIA's spec gives the card
        assert "TRITON_LIBCUDA_PATH" not in text  # and the driver's libraries
        mounts = {m["containerPath"] for m in spec["containerEdits"]["mounts"]}
        assert {LIMITS_MOUNT, PRELOAD_MOUNT, "/usr/local/vgpu/libvgpu.so"} <= mounts
        assert spec["devices"][0]["annotations"] == {f"{ENFORCER_DRIVER}/gpu-uuid": mock_uuid(0)}
        assert _unprepare(running, ("a", A)) == {A: ""}
        assert not paths.spec_path(A).exists()
        assert not paths.limits_path(A).exists()
        assert not paths.shared_dir(A).exists()
        assert _unprepare(running, ("a", A)) == {A: ""}  # again: nothing to do, no error


def test_a_second_share_of_the_same_card_gets_its_own_limits_without_another_slice_read(
    dirs: AgentDirs,
) -> None:
    second = nvidia_claim(
        nvidia_result(memory="2Gi", shares="50", share_id="5b4f0a11-0000-4000-8000-0000000000b2"),
        enforcer_result(), uid=B, name="b", config=[enforcer_config(cores=0, priority=1)],
    )  # fmt: skip
    api = NvidiaNodeApi(nvidia_claim(uid=A, name="a"), second)
    paths = layout(dirs)
    with enforcer_agent(dirs, api) as (_agent, running):
        assert _prepare(running, ("a", A))[A].error == ""
        reads = api.slice_reads
        assert _prepare(running, ("b", B))[B].error == ""
        assert api.slice_reads == reads  # the card was known: no list on the Prepare path
        assert paths.limits_path(B).read_text() == (
            "vgpu-bridge-limits 2\n"
            f"CUDA_DEVICE_MEMORY_LIMIT_{mock_uuid(0)}=2048m\n"
            f"CUDA_DEVICE_SM_LIMIT_{mock_uuid(0)}=0\n"
            "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/shared/vgpu.cache\n"
            "CUDA_TASK_PRIORITY=1\n"
        )
        assert "CUDA_DEVICE_SM_LIMIT_GPU" in paths.limits_path(A).read_text()


def test_a_claim_whose_share_cannot_be_enforced_fails_and_leaves_nothing(dirs: AgentDirs) -> None:
    api = NvidiaNodeApi(
        nvidia_claim(nvidia_result(shares=None), enforcer_result(), uid=A, name="a")
    )
    paths = layout(dirs)
    with enforcer_agent(dirs, api) as (_agent, running):
        answer = _prepare(running, ("a", A))[A]
        assert "no consumedCapacity[shares]" in answer.error
        assert not answer.devices
        assert not paths.spec_path(A).exists()
        assert not paths.limits_path(A).exists()


def test_a_restarted_agent_answers_from_its_checkpoint_and_puts_back_a_lost_spec(
    dirs: AgentDirs,
) -> None:
    api = NvidiaNodeApi(nvidia_claim(uid=A, name="a"))
    paths = layout(dirs)
    with enforcer_agent(dirs, api) as (_agent, running):
        first = _prepare(running, ("a", A))[A]
    paths.spec_path(A).unlink()  # a reboot wiped /var/run/cdi
    paths.limits_path(A).unlink()
    api.asked.clear()
    with enforcer_agent(dirs, api) as (_agent, running):
        assert paths.spec_path(A).exists()
        assert paths.limits_path(A).exists()
        again = _prepare(running, ("a", A))[A]
        assert list(again.devices) == list(first.devices)
        assert api.asked == []  # from the checkpoint: no claim, no slice read
        assert _unprepare(running, ("a", A)) == {A: ""}
        assert list(Path(paths.cdi_dir).iterdir()) == []


def test_a_corrupt_checkpoint_is_rebuilt_with_the_enforced_claims_of_this_node(
    dirs: AgentDirs,
) -> None:
    other_node = nvidia_claim(uid=B, name="b", node="node-b")
    api = NvidiaNodeApi(nvidia_claim(uid=A, name="a"), other_node)
    checkpoint = dirs.root / "plugins" / ENFORCER_DRIVER / "checkpoint.json"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_text("{not json")
    paths = layout(dirs)
    with enforcer_agent(dirs, api) as (agent, running):
        assert [claim.uid for claim in agent.state.snapshot()] == [A]
        assert paths.limits_path(A).exists()
        api.asked.clear()
        assert _prepare(running, ("a", A))[A].devices[0].device_name == "enforcer"
        assert api.asked == []


def test_the_agent_publishes_only_its_enforcer_device_in_the_nodes_pool(dirs: AgentDirs) -> None:
    api = NvidiaNodeApi()
    agent = build(enforcer_settings(dirs), api, gpus=())
    agent.publisher.sync()
    (published,) = api.written.values()
    spec = published["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == (
        ENFORCER_DRIVER,
        NODE,
        NODE,
    )
    assert spec["devices"] == [
        {
            "name": "enforcer",
            "allowMultipleAllocations": True,
            "attributes": {"enforces": {"string": "gpu.nvidia.com"}},
        }
    ]
    assert agent.device_health is None  # NVIDIA's plugin watches its cards
