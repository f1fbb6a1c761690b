"""The agent with mock cards and the stand-in driver: every claim's spec mounts the fake libcuda
and NVML (copied under the vgpu dir) at their SONAMEs and sets the fake's settings for the
claim's cards; its flags go only with mock cards, and one source of mock cards at a time."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.unit.node.agent_settings import agent_settings
from tests.unit.node.claims import NODE, UID, allocated_claim, result
from tests.unit.node.fake_api import FakeApi
from tests.unit.node.mock_driver_files import VERSION, lay_out_mock_driver
from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.node.app import build, driver_watch, find_driver_stack, mock_driver_gpus
from vgpu_bridge.node.gpus import mock_gpus
from vgpu_bridge.node.mock_cards import parse_label
from vgpu_bridge.node.settings import Settings
from vgpu_bridge.node.state import ClaimRef

LABEL = "vgpu-bridge.io/mock-gpus"


def _settings(tmp_path: Path, **extra: object) -> Settings:
    return agent_settings(tmp_path, **{"device_health": False, **extra})


def _spec(settings: Settings, gpus: Any, *devices: str) -> dict[str, Any]:
    agent = build(settings, FakeApi(), gpus=gpus)
    ref = ClaimRef(namespace="team-a", name="pod-gpu-x1", uid=UID)
    claim = allocated_claim(*(result(d, share_id=None) for d in devices), uid=UID)
    spec: dict[str, Any] = json.loads(agent.state.plan(claim, ref).cdi_spec)
    return spec


def test_a_claims_spec_mounts_the_stand_in_driver_and_sets_the_fakes_card(
    tmp_path: Path,
) -> None:
    source = lay_out_mock_driver(tmp_path / "image")
    settings = _settings(tmp_path, mock_gpus_node_label=LABEL, mock_driver=str(source))
    gpus = mock_driver_gpus(source, settings.vgpu_dir, parse_label("2xh100-80gb", node=NODE,
                                                                   label=LABEL))  # fmt: skip
    spec = _spec(settings, gpus, "gpu-1")
    edits = spec["containerEdits"]
    root = tmp_path / "vgpu" / "mock-driver" / "usr/lib/x86_64-linux-gnu"
    mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
    assert mounts["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] == f"{root}/libcuda.so.{VERSION}"
    assert mounts["/usr/lib/x86_64-linux-gnu/libcuda.so"] == f"{root}/libcuda.so.{VERSION}"
    assert mounts["/usr/lib64/libnvidia-ml.so.1"] == f"{root}/libnvidia-ml.so.{VERSION}"
    assert mounts["/etc/ld.so.preload"] == str(tmp_path / "vgpu" / "ld.so.preload")
    env = edits["env"]
    assert f"NVIDIA_VISIBLE_DEVICES={gpus[1].uuid}" in env
    assert f"FAKE_CUDA_MEMORY={80 * 2**30}" in env
    assert "FAKE_CUDA_SM_COUNT=132" in env
    assert "FAKE_NVML_NAME=NVIDIA H100 80GB HBM3" in env
    assert f"FAKE_NVML_DRIVER_VERSION={VERSION}" in env
    assert "deviceNodes" not in edits
    assert all("deviceNodes" not in d["containerEdits"] for d in spec["devices"])
    assert spec["devices"][0]["containerEdits"]["env"] == [
        "CUDA_DEVICE_MEMORY_LIMIT_0=3000m",
        "CUDA_DEVICE_SM_LIMIT_0=30",
    ]


def test_a_claim_on_cards_of_two_sizes_gets_the_larger_as_the_fakes_memory(
    tmp_path: Path,
) -> None:
    source = lay_out_mock_driver(tmp_path / "image")
    listed = (
        "[{uuid: GPU-e2e00000-c1d0-4000-8000-000000000000, productName: A, memory: 24Gi},"
        " {uuid: GPU-e2e00000-c1d0-4000-8000-000000000001, productName: B, memory: 80Gi}]"
    )
    settings = _settings(tmp_path, mock_gpus=listed, mock_driver=str(source))
    gpus = mock_driver_gpus(source, settings.vgpu_dir, mock_gpus(listed))
    env = _spec(settings, gpus, "gpu-0", "gpu-1")["containerEdits"]["env"]
    assert f"FAKE_CUDA_MEMORY={80 * 2**30}" in env
    assert "FAKE_NVML_NAME=A" in env
    assert not any(entry.startswith("FAKE_CUDA_SM_COUNT=") for entry in env)  # the fake's own


def test_the_driver_watch_looks_at_the_stand_in_drivers_copy(tmp_path: Path) -> None:
    source = lay_out_mock_driver(tmp_path / "image")
    settings = _settings(tmp_path, mock_gpus_node_label=LABEL, mock_driver=str(source))
    gpus = mock_driver_gpus(source, settings.vgpu_dir, parse_label("1xl4-24gb", node=NODE,
                                                                   label=LABEL))  # fmt: skip
    agent = build(settings, FakeApi(), gpus=gpus, driver_stack=find_driver_stack(settings, gpus))
    stop = threading.Event()
    check = driver_watch(agent, stop)
    check()
    assert not stop.is_set()
    (settings.vgpu_dir / "mock-driver/usr/lib/x86_64-linux-gnu" / f"libcuda.so.{VERSION}").unlink()
    check()
    assert stop.is_set()


def test_mock_cards_without_the_stand_in_driver_get_no_driver_and_no_fake_settings(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path, mock_gpus_node_label=LABEL)
    spec = _spec(settings, parse_label("1x24Gi", node=NODE, label=LABEL), "gpu-0")
    edits = spec["containerEdits"]
    assert not any(entry.startswith("FAKE_") for entry in edits["env"])
    assert not any("mock-driver" in m["hostPath"] for m in edits["mounts"])


@pytest.mark.parametrize(
    ("values", "field", "reason"),
    [
        ({"mock_gpus": "[]", "mock_gpus_node_label": LABEL}, "mock_gpus_node_label",
         "--mock-gpus and --mock-gpus-node-label both name the mock cards"),
        ({"mock_driver": "/opt/vgpu-bridge/mock-driver"}, "mock_driver",
         "the stand-in driver is for mock cards only"),
        ({"mock_gpus_node_label": LABEL, "mock_driver": "/opt/m", "driver_root": "/"},
         "mock_driver", "--mock-driver and --driver-root both name the containers' driver"),
        ({"mock_gpus_node_label": "bad label!"}, "mock_gpus_node_label", "must be a label key"),
        ({"mock_gpus_node_label": "Bad_Prefix/x"}, "mock_gpus_node_label",
         "the prefix of a label key must be a DNS subdomain"),
        ({"mock_gpus_node_label": LABEL, "mock_driver": "relative/dir"}, "mock_driver",
         "must be an absolute path"),
        ({"mock_gpus_node_label": LABEL, "enforce_driver": "gpu.nvidia.com"},
         "mock_gpus_node_label", "cannot be used with --enforce-driver"),
        ({"mock_driver": "/opt/m", "enforce_driver": "gpu.nvidia.com"}, "mock_driver",
         "cannot be used with --enforce-driver"),
    ],
    ids=["two-sources", "driver-without-mock", "driver-and-root", "bad-key", "bad-prefix",
         "relative", "label-enforcer", "driver-enforcer"],
)  # fmt: skip
def test_mock_flags_that_cannot_work_together_are_refused(
    values: dict[str, str], field: str, reason: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_values({"node_name": NODE, **values})
    assert field in str(refused.value)
    assert reason in str(refused.value)


def test_the_mock_flags_are_env_vars_too() -> None:
    settings = Settings.from_args(
        ["--node-name", "n"],
        {"VGPU_BRIDGE_MOCK_GPUS_NODE_LABEL": LABEL,
         "VGPU_BRIDGE_MOCK_DRIVER": "/opt/vgpu-bridge/mock-driver"},
    )  # fmt: skip
    assert settings.mock_gpus_node_label == LABEL
    assert settings.mock_driver_path == Path("/opt/vgpu-bridge/mock-driver")
    assert settings.mock_mode
