"""`vgpu-bridge node` settings: flags, `VGPU_BRIDGE_*` env vars, and the kubelet's default paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.node.settings import Settings


def test_defaults_are_the_kubelets_paths_for_our_driver() -> None:
    settings = Settings.from_args(["--node-name", "n1"], {})
    assert settings.dra_socket == Path("/var/lib/kubelet/plugins/gpu.vgpu-bridge.io/dra.sock")
    assert settings.registration_socket == Path(
        "/var/lib/kubelet/plugins_registry/gpu.vgpu-bridge.io-reg.sock"
    )
    assert settings.cdi_dir == Path("/var/run/cdi")
    assert settings.checkpoint_file == Path(
        "/var/lib/kubelet/plugins/gpu.vgpu-bridge.io/checkpoint.json"
    )
    assert settings.mock_gpus is None


def test_every_flag_is_also_an_env_var_and_flags_win() -> None:
    environ = {
        "VGPU_BRIDGE_NODE_NAME": "from-env",
        "VGPU_BRIDGE_DRIVER_NAME": "gpu.example.com",
        "VGPU_BRIDGE_PLUGIN_DIR": "/p",
        "VGPU_BRIDGE_REGISTRY_DIR": "/r",
        "VGPU_BRIDGE_MOCK_GPUS": "/gpus.yaml",
        "VGPU_BRIDGE_METRICS_LISTEN": "",
    }
    settings = Settings.from_args(["--node-name", "from-flag"], environ)
    assert settings.node_name == "from-flag"
    assert settings.dra_socket == Path("/p/dra.sock")
    assert settings.registration_socket == Path("/r/gpu.example.com-reg.sock")
    assert settings.mock_gpus == "/gpus.yaml"
    assert settings.metrics_host_port is None
    assert Settings.from_env(environ).node_name == "from-env"


def test_a_node_name_is_required() -> None:
    with pytest.raises(SettingsError, match="node_name"):
        Settings.from_env({})


@pytest.mark.parametrize("name", ["../../etc", "GPU.example.com", "gpu_x.example.com", "a" * 254])
def test_a_driver_name_must_be_a_dns_subdomain(name: str) -> None:
    """It names the plugin dir and the registration socket: no path may hide in it."""
    with pytest.raises(SettingsError, match="driver_name"):
        Settings.from_args(["--node-name", "n1", "--driver-name", name], {})


def test_without_a_driver_root_the_agent_adds_no_driver_files() -> None:
    """The CLI default (and the chart's empty value): today's specs, mock GPUs need nothing."""
    settings = Settings.from_env({"VGPU_BRIDGE_NODE_NAME": "n1", "VGPU_BRIDGE_DRIVER_ROOT": ""})
    assert settings.driver_root_path is None
    assert settings.driver_root_mount_path is None


def test_the_driver_root_is_seen_at_its_own_path_unless_a_mount_is_named() -> None:
    host = Settings.from_args(["--node-name", "n1", "--driver-root", "/"], {})
    assert (host.driver_root_path, host.driver_root_mount_path) == (Path("/"), Path("/"))
    operator = Settings.from_env(
        {
            "VGPU_BRIDGE_NODE_NAME": "n1",
            "VGPU_BRIDGE_DRIVER_ROOT": "/run/nvidia/driver",
            "VGPU_BRIDGE_DRIVER_ROOT_MOUNT": "/driver-root",
        }
    )
    assert operator.driver_root_path == Path("/run/nvidia/driver")
    assert operator.driver_root_mount_path == Path("/driver-root")


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--driver-root", "run/nvidia/driver"),
        ("--driver-root", "/run/../etc"),
        ("--driver-root", "/run/nvidia/driver\n"),
        ("--driver-root", "/" + "d" * 1024),
        ("--driver-root-mount", "driver-root"),
    ],
    ids=["relative", "dot-dot", "newline", "too-long", "relative-mount"],
)
def test_a_driver_root_must_be_a_plain_absolute_path(flag: str, value: str) -> None:
    """It is written into every claim's CDI spec as the host path of the driver's files."""
    args = ["--node-name", "n1", "--driver-root", "/run/nvidia/driver", flag, value]
    with pytest.raises(SettingsError, match=flag.removeprefix("--").replace("-", "_")):
        Settings.from_args(args, {})


def test_a_driver_root_mount_needs_a_driver_root() -> None:
    with pytest.raises(SettingsError, match="driver_root_mount: needs --driver-root"):
        Settings.from_args(["--node-name", "n1", "--driver-root-mount", "/driver-root"], {})


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error"])
def test_the_log_level_is_one_of_four(level: str) -> None:
    env = {"VGPU_BRIDGE_NODE_NAME": "n", "VGPU_BRIDGE_LOG_LEVEL": level}
    assert Settings.from_env(env).log_level == level
    assert Settings.from_args(["--node-name", "n"], {}).log_level == "info"
    with pytest.raises(SettingsError, match="log_level"):
        Settings.from_args(["--node-name", "n", "--log-level", "verbose"], {})
