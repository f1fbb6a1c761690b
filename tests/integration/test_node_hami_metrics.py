"""The agent as `vgpu-bridge node --hami-metrics true` wires it (`app.build`): a share prepared over
its real DRA socket, the claim's region written where libvgpu writes it, the claim's pod looked up
by the agent's own worker, and `/metrics` scraped over real HTTP: HAMi's series name the pod and
container that use the share, with its limit from the allocation, its use from the region, and
HAMi's units; the agent's own build and process series are served beside them."""

from __future__ import annotations

import json
import struct
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.node_harness import AgentDirs, agent_dirs, agent_settings
from tests.unit.node.claims import GPUS, NODE, result
from tests.unit.node.fake_kubelet import FakeKubelet, serving
from tests.unit.node.hami_objects import NAMESPACE, ObjectsApi, pod, reserved_claim
from vgpu_bridge.node.app import Agent, build
from vgpu_bridge.node.kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc
from vgpu_bridge.node.region import (
    COUNTS_OFFSET,
    DEVICES_OFFSET,
    REGION_MAGIC,
    REGION_SIZE,
    REGION_VERSION,
    SLOTS_OFFSET,
)
from vgpu_bridge.version import package_version

MiB = 2**20
UID = "0c1a1d00-0000-4000-8000-0000000000c1"
SHARE_MIB, SHARE_CORES = 3000, 30
USED_MIB, SM_PERCENT = 2900, 27

Samples = dict[str, list[tuple[dict[str, str], float]]]


@pytest.fixture
def agent() -> Iterator[tuple[Agent, int, AgentDirs]]:
    infer = pod(containers={"main": ["gpu"], "sidecar": []})
    share = result(memory=f"{SHARE_MIB}Mi", cores=str(SHARE_CORES))
    api = ObjectsApi(reserved_claim(uid=UID, pods=[infer], results=[share]), infer)
    with agent_dirs() as dirs:
        settings = replace(
            agent_settings(dirs, node=NODE), metrics_listen="127.0.0.1:0", hami_metrics=True
        )
        built = build(settings, api, gpus=GPUS)
        server = built.start()
        assert server is not None
        try:
            yield built, server.server_port, dirs
        finally:
            server.shutdown()
            server.server_close()
            built.close(grace_s=1)


def _prepare(dirs: AgentDirs) -> None:
    with grpc.insecure_channel(f"unix:{dirs.plugin / 'dra.sock'}") as channel:
        request = dra_v1_pb2.NodePrepareResourcesRequest(
            claims=[dra_v1_pb2.Claim(namespace=NAMESPACE, name="infer-gpu-x1", uid=UID)]
        )
        response = dra_v1_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(request, timeout=30)
    assert response.claims[UID].error == ""


def _write_region(dirs: AgentDirs, uuid: str) -> None:
    """What libvgpu writes for one process using USED_MIB and measuring SM_PERCENT."""
    data = bytearray(REGION_SIZE)
    struct.pack_into("<IIQ", data, 0, REGION_MAGIC, REGION_VERSION, REGION_SIZE)
    struct.pack_into("<II", data, COUNTS_OFFSET, 1, 1)
    struct.pack_into("<48sQII", data, DEVICES_OFFSET, uuid.encode(), SHARE_MIB * MiB, 30, 0)
    struct.pack_into("<iiQ", data, SLOTS_OFFSET, 7, 0, 1)
    struct.pack_into("<I", data, SLOTS_OFFSET + 20, SM_PERCENT)
    struct.pack_into("<Q", data, SLOTS_OFFSET + 24, USED_MIB * MiB)
    (dirs.layout.shared_dir(UID) / "vgpu.cache").write_bytes(bytes(data))


def _scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def test_hami_series_name_the_shares_pod_and_container_with_its_limit_and_use(
    agent: tuple[Agent, int, AgentDirs],
) -> None:
    built, port, dirs = agent
    _prepare(dirs)
    spec = json.loads(dirs.layout.spec_path(UID).read_text())
    env = [e for d in spec["devices"] for e in d["containerEdits"].get("env", [])]
    assert f"CUDA_DEVICE_MEMORY_LIMIT_0={SHARE_MIB}m" in env  # what the share enforces
    uuid = GPUS[0].uuid
    _write_region(dirs, uuid)

    before = _scrape(port)
    assert "hami_gpu_memory_limit_bytes" in before  # the cards at once
    assert "hami_vgpu_memory_used_bytes" not in before  # the pod not looked up yet
    assert built.pod_names is not None
    assert built.pod_names.sync() == 2  # the claim, then its pod

    samples = _scrape(port)
    labels = {"namespace": NAMESPACE, "pod": "infer", "container": "main", "vdevice_index": "0",
              "device_uuid": uuid, "zone": "vGPU"}  # fmt: skip
    assert samples["hami_vgpu_memory_limit_bytes"] == [(labels, SHARE_MIB * MiB)]
    assert samples["hami_vgpu_memory_used_bytes"] == [(labels, USED_MIB * MiB)]
    assert samples["hami_container_device_memory_bytes"] == [(labels, USED_MIB * MiB)]
    assert samples["hami_container_device_utilization_ratio"] == [(labels, SM_PERCENT)]
    card = {"node": NODE, "device_uuid": uuid, "device_index": "0", "zone": "vGPU",
            "device_type": f"NVIDIA-{GPUS[0].product_name}"}  # fmt: skip
    assert (card, SHARE_CORES) in samples["hami_gpu_core_allocated_ratio"]
    assert ({**card, "device_cores": "100"}, SHARE_MIB * MiB) in samples[
        "hami_gpu_memory_allocated_bytes"
    ]
    assert (card, 1) in samples["hami_gpu_shared_count"]
    # ours, renamed: ratios 0-1
    [(_, sm)] = samples["vgpu_bridge_claim_sm_utilization_ratio"]
    assert sm == SM_PERCENT / 100
    assert [v for _, v in samples["vgpu_bridge_claim_cores_limit_ratio"]] == [SHARE_CORES / 100]
    # build and process series
    assert samples["vgpu_bridge_build_info"] == [({"version": package_version()}, 1)]
    assert samples["process_resident_memory_bytes"][0][1] > 0
    assert "python_info" in samples


def test_without_any_right_to_read_pods_the_kubelets_socket_names_pod_and_container(
    tmp_path: Path,
) -> None:
    """Issue 35, item 7: the chart grants the agent no pods; the kubelet's pod-resources socket
    names the containers, the claim's reservedFor the pod."""
    infer = pod(containers={"main": ["gpu"], "sidecar": []})
    share = result(memory=f"{SHARE_MIB}Mi", cores=str(SHARE_CORES))
    api = ObjectsApi(reserved_claim(uid=UID, pods=[infer], results=[share]))  # no pod to read
    kubelet = FakeKubelet({(NAMESPACE, "infer"): {
        "main": [(NAMESPACE, "infer-gpu-x1", [(NODE, "gpu-0")])], "sidecar": []}})  # fmt: skip
    with agent_dirs() as dirs, serving(kubelet, tmp_path / "kubelet.sock") as socket:
        settings = replace(agent_settings(dirs, node=NODE), metrics_listen="127.0.0.1:0",
                           hami_metrics=True, pod_resources_socket=socket)  # fmt: skip
        built = build(settings, api, gpus=GPUS)
        server = built.start()
        assert server is not None
        assert built.pod_names is not None
        try:
            _prepare(dirs)
            _write_region(dirs, GPUS[0].uuid)
            assert built.pod_names.sync() == 1  # the claim only: no pod is read
            samples = _scrape(server.server_port)
        finally:
            server.shutdown()
            server.server_close()
            built.close(grace_s=1)
    labels = {"namespace": NAMESPACE, "pod": "infer", "container": "main", "vdevice_index": "0",
              "device_uuid": GPUS[0].uuid, "zone": "vGPU"}  # fmt: skip
    assert samples["hami_vgpu_memory_limit_bytes"] == [(labels, SHARE_MIB * MiB)]
    assert samples["hami_vgpu_memory_used_bytes"] == [(labels, USED_MIB * MiB)]
    assert not [c for c in api.calls if c.startswith("/api/v1/")]
    assert kubelet.calls == 1
