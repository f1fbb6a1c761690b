"""Device health as `vgpu-bridge node` wires it: mock GPUs' health files, the slices through the
publisher, the metric, the settings that change or switch it off."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest

from tests.unit.node.agent_settings import agent_settings
from tests.unit.node.fake_api import FakeApi
from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.node.app import build
from vgpu_bridge.node.device_health.nvml_source import NvmlHealthOnFirstUse
from vgpu_bridge.node.gpus import mock_gpus
from vgpu_bridge.node.settings import Settings

MOCK = (
    "[{uuid: GPU-a, productName: H100, memory: 80Gi},"
    " {uuid: GPU-b, productName: H100, memory: 80Gi}]"
)


def _settings(tmp_path: Path, **extra: object) -> Settings:
    return agent_settings(tmp_path, **{"mock_gpus": MOCK, **extra})


def _taints(api: FakeApi) -> dict[str, list[dict[str, str]]]:
    devices = [d for s in api.slices.values() for d in s["spec"].get("devices", [])]
    return {d["name"]: d["taints"] for d in devices if "taints" in d}


def test_a_mock_cards_health_file_taints_it_in_the_slice_and_removing_it_heals_it(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path)
    api = FakeApi()
    agent = build(settings, api, gpus=mock_gpus(MOCK))
    assert agent.device_health is not None
    settings.mock_health_dir.mkdir()
    (settings.mock_health_dir / "gpu-1").write_text("79\n")
    assert agent.device_health.check()
    [[taint]] = _taints(api).values()
    assert list(_taints(api)) == ["gpu-1"]
    assert (taint["key"], taint["value"], taint["effect"]) == (
        "gpu.vgpu-bridge.io/unhealthy", "xid-79", "NoSchedule",
    )  # fmt: skip
    metrics = generate_latest(agent.registry).decode()
    assert 'device="gpu-1",node="node-a",reason="xid-79",uuid="GPU-b"} 0.0' in metrics
    assert 'device="gpu-0",node="node-a",reason="",uuid="GPU-a"} 1.0' in metrics
    (settings.mock_health_dir / "gpu-1").unlink()
    assert agent.device_health.check()
    assert _taints(api) == {}


def test_the_taint_effect_is_a_setting(tmp_path: Path) -> None:
    settings = _settings(tmp_path, device_taint_effect="NoExecute")
    api = FakeApi()
    agent = build(settings, api, gpus=mock_gpus(MOCK))
    assert agent.device_health is not None
    settings.mock_health_dir.mkdir()
    (settings.mock_health_dir / "gpu-0").write_text("lost")
    agent.device_health.check()
    assert _taints(api)["gpu-0"] == [
        {"key": "gpu.vgpu-bridge.io/unhealthy", "value": "gpu-lost", "effect": "NoExecute",
         "timeAdded": agent.device_health.taints["GPU-a"].time_added}
    ]  # fmt: skip


def test_device_health_switched_off_watches_nothing_and_exports_no_metric(tmp_path: Path) -> None:
    agent = build(_settings(tmp_path, device_health=False), FakeApi(), gpus=mock_gpus(MOCK))
    assert agent.device_health is None
    assert "vgpu_bridge_device_healthy" not in generate_latest(agent.registry).decode()


def test_real_cards_are_watched_through_nvml_started_on_first_use(tmp_path: Path) -> None:
    agent = build(_settings(tmp_path, mock_gpus=None), FakeApi(), gpus=mock_gpus(MOCK))
    assert agent.device_health is not None
    assert isinstance(agent.device_health.source, NvmlHealthOnFirstUse)


def test_a_bad_taint_effect_is_refused_naming_the_setting() -> None:
    with pytest.raises(SettingsError, match="device_taint_effect"):
        Settings.from_args(["--node-name", "n1", "--device-taint-effect", "PreferNoSchedule"], {})
    settings = Settings.from_args(["--node-name", "n1"], {"VGPU_BRIDGE_DEVICE_HEALTH": "false"})
    assert not settings.device_health
    defaults = Settings.from_args(["--node-name", "n1"], {})
    assert (defaults.device_health, defaults.device_taint_effect) == (True, "NoSchedule")
    assert defaults.mock_health_dir == Path(
        "/var/lib/kubelet/plugins/gpu.vgpu-bridge.io/mock-health"
    )
