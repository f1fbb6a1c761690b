"""`vgpu-bridge node --enforce-driver gpu.nvidia.com`: the agent in enforcer mode (issue 37), its
flag, its default driver name, and the flags that make no sense beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.node.settings import Settings

NODE = ["--node-name", "n1"]


def test_enforcer_mode_runs_under_the_enforcer_driver_name_by_default() -> None:
    settings = Settings.from_args([*NODE, "--enforce-driver", "gpu.nvidia.com"], {})
    assert settings.enforce_driver == "gpu.nvidia.com"
    assert settings.driver_name == "enforcer.vgb.io"
    assert settings.dra_socket == Path("/var/lib/kubelet/plugins/enforcer.vgb.io/dra.sock")
    assert settings.registration_socket == Path(
        "/var/lib/kubelet/plugins_registry/enforcer.vgb.io-reg.sock"
    )


def test_enforcer_mode_is_also_an_env_var_and_takes_a_driver_name() -> None:
    environ = {"VGPU_BRIDGE_ENFORCE_DRIVER": "gpu.nvidia.com",
               "VGPU_BRIDGE_DRIVER_NAME": "enforcer.example.com"}  # fmt: skip
    settings = Settings.from_args(NODE, environ)
    assert (settings.enforce_driver, settings.driver_name) == (
        "gpu.nvidia.com",
        "enforcer.example.com",
    )


def test_without_enforcer_mode_the_driver_name_is_ours() -> None:
    settings = Settings.from_args(NODE, {})
    assert (settings.enforce_driver, settings.driver_name) == ("", "gpu.vgpu-bridge.io")


@pytest.mark.parametrize("driver", ["gpu.vgpu-bridge.io", "hami-core-gpu.project-hami.io", "x"])
def test_only_nvidias_driver_can_be_enforced(driver: str) -> None:
    with pytest.raises(SettingsError, match=r"enforce_driver: only gpu\.nvidia\.com"):
        Settings.from_args([*NODE, "--enforce-driver", driver], {})


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--mock-gpus", "/gpus.yaml"), ("--driver-root", "/"), ("--driver-root-mount", "/x")],
)
def test_flags_of_our_own_cards_are_refused_in_enforcer_mode(flag: str, value: str) -> None:
    """NVIDIA's plugin owns the cards and the driver's files there: naming both is a mistake."""
    extra = ["--driver-root", "/"] if flag == "--driver-root-mount" else []
    with pytest.raises(SettingsError) as refused:
        Settings.from_args([*NODE, "--enforce-driver", "gpu.nvidia.com", flag, value, *extra], {})
    assert f"{flag} cannot be used with --enforce-driver" in str(refused.value)


def test_an_empty_driver_name_is_still_refused() -> None:
    with pytest.raises(SettingsError, match="driver_name"):
        Settings.from_args([*NODE, "--driver-name", "-"], {})


@pytest.mark.parametrize(
    "mode", [[], ["--enforce-driver", "gpu.nvidia.com"]], ids=["ours", "enforcer"]
)
def test_the_driver_name_of_an_enforced_driver_is_refused(mode: list[str]) -> None:
    """It would take NVIDIA's plugin dir, checkpoint and registration socket."""
    with pytest.raises(SettingsError, match=r"driver_name: .*gpu\.nvidia\.com.*NVIDIA"):
        Settings.from_args([*NODE, *mode, "--driver-name", "gpu.nvidia.com"], {})
