"""A claim kube-scheduler made for an extended resource (KEP-5004: our DeviceClass with
`extendedResourceName: nvidia.com/gpu`, a pod asking `nvidia.com/gpu: N` the webhook never saw):
no label or template of ours, requests named `container-<i>-request-<j>` with no capacity asked,
so each card consumes our slices' request-policy defaults. The agent prepares it as whole cards.

The claim is shaped as kube-scheduler v1.37 writes it (the dynamicresources plugin's
extended-resource claim: generated name, annotation, controller owner; the allocator's results),
and read by the agent through a real API client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.node.claims import NODE
from tests.unit.recording_api import RecordingApi
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.core.quantity import MiB
from vgpu_bridge.node.cdi import CdiLayout, limits_text
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.slices import device
from vgpu_bridge.node.state import ClaimRef, DeviceState

Json = dict[str, Any]
NAMESPACE = "no-webhook"
POD = "trainer"
CLAIM = f"{POD}-extended-resources-x7k2p"
UID = "5e4c0000-0000-4000-8000-0000000000e1"
POD_UID = "9a0d0000-0000-4000-8000-0000000000f2"
CLAIMS = "/apis/resource.k8s.io/v1"
REQUEST = "container-0-request-0"  # kube-scheduler's name: container 0, its request 0 (sorted)
GPUS = (
    Gpu(index=0, uuid="GPU-aaaa", product_name="NVIDIA H100 80GB HBM3", memory=80 * 2**30),
    # NVML's total need not be whole MiB: the slice offers (and the claim consumes) whole MiB
    Gpu(index=1, uuid="GPU-bbbb", product_name="NVIDIA A100-PCIE-40GB", memory=40 * 2**30 + 4096),
)


def consumed_by_default(gpu: Gpu) -> Json:
    """What a request without capacity requests consumes of `gpu`, as the allocator fills it:
    each capacity's request-policy default as our slice publishes it."""
    capacity = device(gpu, DEFAULT)["capacity"]
    return {name: entry["requestPolicy"]["default"] for name, entry in capacity.items()}


def scheduler_claim(*gpus: Gpu) -> Json:
    """The claim as kube-scheduler creates it at PreBind and allocates it: one request per
    container, `count` cards of our class, nothing else."""
    results = [
        {
            "request": REQUEST,
            "driver": DEFAULT.driver,
            "pool": NODE,
            "device": gpu.device_name,
            "shareID": f"3b1f0000-0000-4000-8000-00000000000{index}",
            "consumedCapacity": consumed_by_default(gpu),
        }
        for index, gpu in enumerate(gpus)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": CLAIM,
            "generateName": f"{POD}-extended-resources-",
            "namespace": NAMESPACE,
            "uid": UID,
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": POD,
                    "uid": POD_UID,
                    "controller": True,
                },
            ],
            "finalizers": ["resource.kubernetes.io/delete-protection"],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": REQUEST,
                        "exactly": {
                            "deviceClassName": DEFAULT.device_class,
                            "allocationMode": "ExactCount",
                            "count": len(gpus),
                        },
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [NODE]}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": POD, "uid": POD_UID}],
        },
    }


@pytest.fixture
def layout(tmp_path: Path) -> CdiLayout:
    return CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)


@pytest.fixture
def state(recorded: RecordingApi, layout: CdiLayout, tmp_path: Path) -> Iterator[DeviceState]:
    recorded.objects[f"{CLAIMS}/resourceclaims"] = {"items": []}
    checkpoint_file = tmp_path / "plugin" / "checkpoint.json"
    checkpoint_file.parent.mkdir()
    agent = DeviceState(recorded.api, node=NODE, profile=DEFAULT, gpus=GPUS, layout=layout,
                        checkpoint_file=checkpoint_file)  # fmt: skip
    agent.start()
    yield agent
    agent.close()


def prepare(state: DeviceState, recorded: RecordingApi, claim: Json) -> Any:
    recorded.objects[f"{CLAIMS}/namespaces/{NAMESPACE}/resourceclaims/{CLAIM}"] = claim
    return state.prepare([ClaimRef(NAMESPACE, CLAIM, UID)])[UID]


def spec_env(layout: CdiLayout) -> tuple[list[list[str]], list[str]]:
    spec = json.loads(layout.spec_path(UID).read_text())
    per_device = [d["containerEdits"]["env"] for d in spec["devices"]]
    return per_device, spec["containerEdits"]["env"]


def test_our_slices_default_every_capacity_to_the_whole_card() -> None:
    """The premise: a claim asking no capacity consumes the whole card's memory and cores (the
    core booking takes its least step, 1, as a share without an SM limit does)."""
    assert consumed_by_default(GPUS[0]) == {"memory": "80Gi", "cores": "100", "milliCores": "1"}
    assert consumed_by_default(GPUS[1])["memory"] == "40Gi"


def test_a_scheduler_made_claim_for_one_gpu_is_prepared_as_the_whole_card(
    state: DeviceState, recorded: RecordingApi, layout: CdiLayout
) -> None:
    answer = prepare(state, recorded, scheduler_claim(GPUS[0]))

    assert answer.error is None
    [prepared] = answer.devices
    # the kubelet hands a container the CDI devices of the requests its mapping names
    assert prepared.request_names == (REQUEST,)
    assert (prepared.device_name, prepared.memory, prepared.cores) == ("gpu-0", 80 * 2**30, 100)
    assert prepared.cdi_device_ids == (layout.device_id(UID, 0),)
    per_device, common = spec_env(layout)
    assert per_device == [["CUDA_DEVICE_MEMORY_LIMIT_0=81920m", "CUDA_DEVICE_SM_LIMIT_0=100"]]
    assert "NVIDIA_VISIBLE_DEVICES=GPU-aaaa" in common
    assert "CUDA_DEVICE_SM_LIMIT=100" in common
    assert not any(entry.startswith("CUDA_TASK_PRIORITY=") for entry in common)


def test_two_gpus_are_two_whole_cards_each_limited_to_its_own_size(
    state: DeviceState, recorded: RecordingApi, layout: CdiLayout
) -> None:
    answer = prepare(state, recorded, scheduler_claim(*GPUS))

    assert answer.error is None
    assert [(d.device_name, d.memory // MiB, d.cores) for d in answer.devices] == [
        ("gpu-0", 81920, 100),
        ("gpu-1", 40960, 100),
    ]
    per_device, common = spec_env(layout)
    assert per_device == [
        ["CUDA_DEVICE_MEMORY_LIMIT_0=81920m", "CUDA_DEVICE_SM_LIMIT_0=100"],
        ["CUDA_DEVICE_MEMORY_LIMIT_1=40960m", "CUDA_DEVICE_SM_LIMIT_1=100"],
    ]
    assert "NVIDIA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb" in common
    limits = (layout.limits_dir / f"{UID}.conf").read_text()
    spec = json.loads(layout.spec_path(UID).read_text())
    assert limits == limits_text(spec)
    assert "CUDA_DEVICE_MEMORY_LIMIT_GPU-bbbb=40960m\nCUDA_DEVICE_SM_LIMIT_GPU-bbbb=100\n" in limits


def test_the_claim_is_read_by_name_and_prepared_again_from_the_checkpoint(
    state: DeviceState, recorded: RecordingApi, layout: CdiLayout
) -> None:
    first = prepare(state, recorded, scheduler_claim(GPUS[0]))
    reads = len(recorded.paths)
    again = state.prepare([ClaimRef(NAMESPACE, CLAIM, UID)])[UID]

    assert again.error is None
    assert again.devices == first.devices
    assert len(recorded.paths) == reads  # answered from the checkpoint, no second read
    assert recorded.paths[-1] == f"{CLAIMS}/namespaces/{NAMESPACE}/resourceclaims/{CLAIM}"
    assert state.unprepare([ClaimRef(NAMESPACE, CLAIM, UID)]) == {UID: None}
    assert not layout.spec_path(UID).exists()
