"""The stand-in for NVIDIA's kubelet plugin (e2e/nvidia/standin_plugin.py) behaves as NVIDIA's
does at 95932046 (docs/reference/nvidia-dra-driver.md §3-4), over its real gRPC socket, with an
in-memory API: no cluster, no kubelet (the real-node tier runs it beside the real kubelet)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from e2e.cluster.client import ApiError, Json
from e2e.nvidia.slices import NvidiaCard, mock_uuid
from e2e.nvidia.standin_plugin import DriverFiles, NvidiaStandIn, spec_path
from vgpu_bridge.node.kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc

RESOURCE = "/apis/resource.k8s.io/v1"
NODE = "n1"
CARD = NvidiaCard(minor=1, uuid=mock_uuid(1))


class MemoryApi:
    """The few API calls the stand-in makes, over dicts."""

    def __init__(self) -> None:
        self.objects: dict[str, Json] = {f"/api/v1/nodes/{NODE}": {"metadata": {"uid": "node-uid"}}}

    def get(self, path: str, **query: str) -> Json:
        if path not in self.objects:
            raise ApiError("GET", path, 404, "not found")
        return self.objects[path]

    def create(self, path: str, body: Json) -> Json:
        created = {**body, "metadata": {**body["metadata"], "name": "slice-1"}}
        self.objects[f"{path}/slice-1"] = created
        return created

    def delete(self, path: str, **_: Any) -> None:
        self.objects.pop(path, None)


def claim(uid: str, results: list[Json]) -> Json:
    return {
        "metadata": {"name": f"claim-{uid}", "namespace": "ns", "uid": uid},
        "status": {"allocation": {"devices": {"results": results}}},
    }


NVIDIA_RESULT = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-1",
                 "shareID": "s-1",
                 "consumedCapacity": {"memory": "1000Mi", "shares": "30"}}  # fmt: skip
OUR_RESULT = {"request": "vgpu-limits", "driver": "enforcer.vgb.io", "pool": NODE,
              "device": "enforcer"}  # fmt: skip


@pytest.fixture
def driver_root(tmp_path: Path) -> Path:
    lib = tmp_path / "driver" / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.555.42.06").write_bytes(b"cuda")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.555.42.06")
    (tmp_path / "driver/usr/bin").mkdir()
    (tmp_path / "driver/usr/bin/nvidia-smi").write_bytes(b"smi")
    return tmp_path / "driver"


@pytest.fixture
def api() -> MemoryApi:
    return MemoryApi()


@pytest.fixture
def plugin(tmp_path: Path, api: MemoryApi, driver_root: Path) -> Iterator[NvidiaStandIn]:
    kubelet_dir = Path(tempfile.mkdtemp(prefix="vb-nv-", dir="/tmp"))  # AF_UNIX: < 108 bytes
    standin = NvidiaStandIn(
        api,  # type: ignore[arg-type]
        node=NODE,
        cards=[CARD],
        kubelet_dir=kubelet_dir,
        cdi_dir=tmp_path / "cdi",
        dev_dir=tmp_path / "dev",
        files=DriverFiles(driver_root, "usr/lib/x86_64-linux-gnu"),
    )
    standin.start()
    yield standin
    standin.stop()
    shutil.rmtree(kubelet_dir)


def prepare(plugin: NvidiaStandIn, uid: str) -> dra_v1_pb2.NodePrepareResourcesResponse:
    with grpc.insecure_channel(f"unix:{plugin.dra_socket}") as channel:
        request = dra_v1_pb2.NodePrepareResourcesRequest(
            claims=[dra_v1_pb2.Claim(namespace="ns", name=f"claim-{uid}", uid=uid)]
        )
        response: dra_v1_pb2.NodePrepareResourcesResponse = dra_v1_pb2_grpc.DRAPluginStub(
            channel
        ).NodePrepareResources(request, timeout=10)
        return response


def unprepare(plugin: NvidiaStandIn, uid: str) -> None:
    with grpc.insecure_channel(f"unix:{plugin.dra_socket}") as channel:
        request = dra_v1_pb2.NodeUnprepareResourcesRequest(
            claims=[dra_v1_pb2.Claim(namespace="ns", name=f"claim-{uid}", uid=uid)]
        )
        dra_v1_pb2_grpc.DRAPluginStub(channel).NodeUnprepareResources(request, timeout=10)


def test_it_publishes_nvidias_slice_for_its_node_in_the_100_shares_mode(
    plugin: NvidiaStandIn, api: MemoryApi
) -> None:
    body = api.objects[f"{RESOURCE}/resourceslices/slice-1"]
    assert body["spec"]["driver"] == "gpu.nvidia.com"
    assert body["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    [device] = body["spec"]["devices"]
    assert device["name"] == "gpu-1"
    assert device["capacity"]["shares"]["value"] == "100"


def test_prepare_answers_its_own_result_only_and_writes_nvidias_transient_spec(
    plugin: NvidiaStandIn, api: MemoryApi, driver_root: Path
) -> None:
    api.objects[f"{RESOURCE}/namespaces/ns/resourceclaims/claim-u1"] = claim(
        "u1", [NVIDIA_RESULT, OUR_RESULT]
    )

    answer = prepare(plugin, "u1").claims["u1"]

    assert answer.error == ""
    [device] = answer.devices
    assert list(device.request_names) == ["gpu"]
    assert (device.pool_name, device.device_name) == (NODE, "gpu-1")
    assert list(device.cdi_device_ids) == ["k8s.gpu.nvidia.com/claim=u1-gpu-1"]
    assert not device.HasField("share_id")
    spec = yaml.safe_load(spec_path(plugin.cdi_dir, "u1").read_text())
    assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", "k8s.gpu.nvidia.com/claim")
    [cdi_device] = spec["devices"]
    assert cdi_device["name"] == "u1-gpu-1"
    assert cdi_device["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia1", "hostPath": str(plugin.dev_dir / "nvidia1")}
    ]
    edits = spec["containerEdits"]
    assert edits["env"] == [
        "NVIDIA_VISIBLE_DEVICES=void",
        "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu",
    ]
    assert [n["path"] for n in edits["deviceNodes"]] == [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"
    ]  # fmt: skip
    mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
    real = str(driver_root / "usr/lib/x86_64-linux-gnu/libcuda.so.555.42.06")
    assert mounts["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] == real
    assert mounts["/usr/lib/x86_64-linux-gnu/libcuda.so.555.42.06"] == real
    assert mounts["/usr/bin/nvidia-smi"] == str(driver_root / "usr/bin/nvidia-smi")
    assert not any("LD_PRELOAD" in e or "ld.so.preload" in str(m) for e in edits["env"]
                   for m in edits["mounts"])  # fmt: skip
    node = os.stat(plugin.dev_dir / "nvidia1")
    assert stat.S_ISCHR(node.st_mode)
    assert (os.major(node.st_rdev), os.minor(node.st_rdev)) == (195, 1)


def test_prepare_is_idempotent_and_unprepare_deletes_the_spec(
    plugin: NvidiaStandIn, api: MemoryApi
) -> None:
    api.objects[f"{RESOURCE}/namespaces/ns/resourceclaims/claim-u2"] = claim("u2", [NVIDIA_RESULT])
    first = prepare(plugin, "u2").claims["u2"]
    del api.objects[f"{RESOURCE}/namespaces/ns/resourceclaims/claim-u2"]

    again = prepare(plugin, "u2").claims["u2"]
    unprepare(plugin, "u2")

    assert again == first
    assert not spec_path(plugin.cdi_dir, "u2").exists()


def test_a_result_on_a_device_it_does_not_have_fails_that_claim(
    plugin: NvidiaStandIn, api: MemoryApi
) -> None:
    foreign = {**NVIDIA_RESULT, "device": "gpu-7"}
    api.objects[f"{RESOURCE}/namespaces/ns/resourceclaims/claim-u3"] = claim("u3", [foreign])

    answer = prepare(plugin, "u3").claims["u3"]

    assert "no device n1/gpu-7 here" in answer.error
    assert not spec_path(plugin.cdi_dir, "u3").exists()
