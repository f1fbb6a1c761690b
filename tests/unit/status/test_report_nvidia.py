"""`kubectl vgpu status --profile nvidia`: cards are NVIDIA's full GPUs (its slices: uuid,
productName, memory, and shares where it runs with N of them; MIG and VFIO devices are not
shares of ours), each share's booking is NVIDIA's consumedCapacity (memory, shares as the
percent of the card they are), its priority the config of our enforcer beside it, and our
enforcer device is never a card."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest

from e2e.nvidia.slices import NvidiaCard, nvidia_resource_slice
from tests.unit.status.served_api import served_api
from vgpu_bridge.core import ENFORCER_DRIVER, ENFORCER_REQUEST, nvidia_profile
from vgpu_bridge.core.opaque_config import GpuShareConfig
from vgpu_bridge.status import build_report, command
from vgpu_bridge.status.render import render

GIB, MIB = 2**30, 2**20
NODE = "gpu-node-1"
RESOURCE = "/apis/resource.k8s.io/v1"
H100 = NvidiaCard(minor=0, uuid="GPU-00000000-0000-0000-0000-000000000000")
A100 = NvidiaCard(minor=1, uuid="GPU-00000001-0000-0000-0000-000000000000",
                  memory_bytes=40 * GIB, product_name="NVIDIA A100-PCIE-40GB")  # fmt: skip


def nvidia_slices(mode: str = "100") -> list[dict[str, Any]]:
    piece = nvidia_resource_slice(NODE, [H100, A100], mode)
    piece["metadata"]["name"] = "00000-gpu.nvidia.com-gpu-node-1-x"
    mig = {"name": "gpu-0-mig-1g10gb-19-0",
           "attributes": {"type": {"string": "mig"}, "uuid": {"string": "MIG-1"}},
           "capacity": {"memory": {"value": "10Gi"}}}  # fmt: skip
    piece["spec"]["devices"].append(mig)
    device = {"name": "enforcer", "allowMultipleAllocations": True}
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    enforcer = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": "enforcer-x"},
                "spec": {"driver": ENFORCER_DRIVER, "nodeName": NODE, "pool": pool,
                         "devices": [device]}}  # fmt: skip
    return [piece, enforcer]


def share_claim(
    name: str,
    device: str,
    memory: str,
    shares: str | None,
    priority: int | None = None,
    cores: int | None = None,
) -> dict[str, Any]:
    consumed = {"memory": memory, **({"shares": shares} if shares else {})}
    config = {"source": "FromClaim", "requests": [ENFORCER_REQUEST], "opaque": {
        "driver": ENFORCER_DRIVER,
        "parameters": GpuShareConfig(priority=priority, cores=cores).to_parameters()}}  # fmt: skip
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": device,
         "shareID": "s", "consumedCapacity": consumed},
        {"request": ENFORCER_REQUEST, "driver": ENFORCER_DRIVER, "pool": NODE,
         "device": "enforcer", "shareID": "e"},
    ]  # fmt: skip
    allocation = {"devices": {"results": results, "config": [config]}}
    meta = {"name": name, "namespace": "team-a", "uid": f"uid-{name}"}
    return {"metadata": meta, "spec": {"devices": {"requests": []}},
            "status": {"allocation": allocation}}  # fmt: skip


CLAIMS = [
    share_claim("infer", "gpu-0", "30000Mi", "30", priority=0, cores=30),
    share_claim("train", "gpu-1", "20Gi", "50", priority=1),
]


def test_cards_are_nvidias_full_gpus_and_shares_book_their_percent() -> None:
    report = build_report(nvidia_slices(), CLAIMS, [], profile=nvidia_profile())
    cards = {c.device: c for c in report.cards}
    assert set(cards) == {"gpu-0", "gpu-1"}  # neither the MIG device nor our enforcer
    h100, a100 = cards["gpu-0"], cards["gpu-1"]
    assert (h100.uuid, h100.product, h100.memory, h100.cores) == (
        H100.uuid, "NVIDIA H100 80GB HBM3", 80 * GIB, 100)  # fmt: skip
    assert (h100.booked_memory, h100.booked_cores, h100.free_cores) == (30000 * MIB, 30, 70)
    assert (a100.memory, a100.booked_memory, a100.booked_cores) == (40 * GIB, 20 * GIB, 50)
    [infer] = h100.shares
    assert (infer.claim, infer.memory, infer.cores, infer.priority) == ("infer", 30000 * MIB, 30, 0)
    assert a100.shares[0].priority == 1
    assert report.unplaced == ()


def test_shares_of_another_n_are_the_percent_of_the_card() -> None:
    claims = [share_claim("quarter", "gpu-0", "1Gi", "1")]
    report = build_report(nvidia_slices("4"), claims, [], profile=nvidia_profile("4"))
    h100 = next(c for c in report.cards if c.device == "gpu-0")
    assert (h100.cores, h100.booked_cores, h100.shares[0].cores) == (100, 25, 25)


def test_a_card_whose_n_shares_are_all_booked_is_full_not_99() -> None:
    claims = [share_claim(name, "gpu-0", "1Gi", "1") for name in ("a", "b", "c")]
    report = build_report(nvidia_slices("3"), claims, [], profile=nvidia_profile("3"))
    h100 = next(c for c in report.cards if c.device == "gpu-0")
    assert [s.cores for s in h100.shares] == [33, 33, 33]  # each share's SM limit on the node
    assert (h100.booked_cores, h100.free_cores) == (100, 0)


def test_a_share_under_a_percent_shows_the_one_percent_the_node_gives_it() -> None:
    claims = [share_claim(name, "gpu-0", "1Gi", "1") for name in ("a", "b")]
    report = build_report(nvidia_slices("300"), claims, [], profile=nvidia_profile("300"))
    h100 = next(c for c in report.cards if c.device == "gpu-0")
    assert [s.cores for s in h100.shares] == [1, 1]
    assert h100.booked_cores == 1  # 2 of 300 shares, converted once for the card


def test_where_nvidia_books_no_sms_the_cores_columns_say_not_known() -> None:
    claims = [share_claim("m", "gpu-0", "1Gi", None, cores=30)]
    report = build_report(nvidia_slices("memory"), claims, [], profile=nvidia_profile("memory"))
    h100 = next(c for c in report.cards if c.device == "gpu-0")
    assert h100.shares[0].cores is None
    header, row = render(report, "table").splitlines()[:2]
    assert header.split()[-3:] == ["CORES", "FREE-CORES", "SHARES"]
    assert row.split()[-3:] == ["-", "-", "1"]


def test_a_share_on_a_mig_device_is_not_shown_as_ours() -> None:
    claims = [share_claim("mig", "gpu-0-mig-1g10gb-19-0", "10Gi", None)]
    report = build_report(nvidia_slices(), claims, [], profile=nvidia_profile())
    assert report.unplaced == ()
    assert all(not c.shares for c in report.cards)


@pytest.mark.parametrize("mode", ["100", "memory"])
def test_the_command_reads_nvidias_slices_with_profile_nvidia(tmp_path: Path, mode: str) -> None:
    with served_api() as served:
        slices = [s for s in nvidia_slices(mode) if s["spec"]["driver"] == "gpu.nvidia.com"]
        served.list_of(
            f"{RESOURCE}/resourceslices", slices, fieldSelector="spec.driver=gpu.nvidia.com"
        )
        served.list_of(f"{RESOURCE}/resourceclaims", CLAIMS)
        served.list_of("/api/v1/pods", [])
        parser = argparse.ArgumentParser()
        command.add_arguments(parser)
        kubeconfig = served.kubeconfig(tmp_path)
        args = parser.parse_args(["--kubeconfig", str(kubeconfig), "--context", "served", "-A",
                                  "--profile", "nvidia", "--nvidia-consumable-shares", mode,
                                  "-o", "json"])  # fmt: skip
        out = io.StringIO()
        assert command.main(args, {}, out) == 0
    found = json.loads(out.getvalue())
    assert [c["uuid"] for c in found["cards"]] == [H100.uuid, A100.uuid]
    assert found["cards"][0]["shares"][0]["claim"] == "infer"


def test_a_profile_or_mode_the_view_does_not_know_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["--profile", "nvidia", "--nvidia-consumable-shares", "disabled"])
    assert command.main(args, {}, io.StringIO()) == command.EXIT_USAGE
    assert "--nvidia-consumable-shares" in capsys.readouterr().err
