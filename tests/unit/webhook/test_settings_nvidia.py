"""The webhook's nvidia profile settings: NVIDIA's `--consumable-shares` mode and our enforcer's
driver, each checked at start with a reason that names the setting."""

from __future__ import annotations

import pytest

from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.webhook.settings import Settings

TLS = {"VGPU_BRIDGE_TLS_CERT_FILE": "/tls/crt", "VGPU_BRIDGE_TLS_KEY_FILE": "/tls/key"}


def test_the_nvidia_profile_defaults_to_100_shares_and_our_enforcer() -> None:
    settings = Settings.from_env({**TLS, "VGPU_BRIDGE_PROFILE": "nvidia"})
    assert settings.profile == "nvidia"
    assert settings.nvidia_consumable_shares == "100"
    assert settings.enforcer_driver == "enforcer.vgb.io"


@pytest.mark.parametrize("mode", ["memory", "unlimited", "1", "4", "100", "1000"])
def test_every_mode_nvidia_runs_in_is_taken(mode: str) -> None:
    settings = Settings.from_args(["--profile", "nvidia", "--nvidia-consumable-shares", mode], TLS)
    assert settings.nvidia_consumable_shares == mode


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("disabled", "NVIDIA's driver must run with ConsumableShares"),
        ("", "NVIDIA's driver must run with ConsumableShares"),
        ("0", "1..10000000"),
        ("-4", "memory, unlimited or a whole number"),
        ("1e3", "memory, unlimited or a whole number"),
        ("Memory", "memory, unlimited or a whole number"),
        ("100000000", "1..10000000"),
    ],
)
def test_a_mode_nvidia_cannot_run_in_is_refused_naming_the_setting(mode: str, reason: str) -> None:
    env = {**TLS, "VGPU_BRIDGE_PROFILE": "nvidia", "VGPU_BRIDGE_NVIDIA_CONSUMABLE_SHARES": mode}
    with pytest.raises(SettingsError, match="nvidia_consumable_shares") as raised:
        Settings.from_env(env)
    assert reason in str(raised.value)


@pytest.mark.parametrize("driver", ["Enforcer.vgb.io", "enforcer..vgb.io", "x" * 254])
def test_an_enforcer_driver_that_is_no_driver_name_is_refused(driver: str) -> None:
    with pytest.raises(SettingsError, match="enforcer_driver"):
        Settings.from_env({**TLS, "VGPU_BRIDGE_ENFORCER_DRIVER": driver})


def test_an_enforcer_driver_with_gpu_in_its_name_is_refused_for_kai() -> None:
    """KAI counts every device whose driver name contains "gpu" as a node GPU: an enforcer so
    named would add one phantom GPU per node to KAI's capacity."""
    with pytest.raises(SettingsError, match=r"enforcer_driver.*gpu"):
        Settings.from_env({**TLS, "VGPU_BRIDGE_ENFORCER_DRIVER": "vgpu-enforcer.example.com"})


def test_the_enforcer_cannot_take_the_name_of_the_driver_it_enforces() -> None:
    with pytest.raises(SettingsError, match="enforcer_driver"):
        Settings.from_env({**TLS, "VGPU_BRIDGE_ENFORCER_DRIVER": "gpu.nvidia.com"})


def test_the_enforcer_cannot_share_our_own_driver_name() -> None:
    env = {**TLS, "VGPU_BRIDGE_ENFORCER_DRIVER": "shared.example.com",
           "VGPU_BRIDGE_DRIVER_NAME": "shared.example.com"}  # fmt: skip
    with pytest.raises(SettingsError, match="enforcer_driver"):
        Settings.from_env(env)


@pytest.mark.parametrize(
    ("mode", "shares", "booked_in"),
    [("100", 100, "shares"), ("4", 4, "shares"), ("memory", None, None), ("unlimited", None, None)],
)
def test_the_webhook_is_built_for_nvidias_class_in_its_mode(
    mode: str, shares: int | None, booked_in: str | None
) -> None:
    """Claims, card sizes (NVIDIA's slices), quotas and Events all read the one profile."""
    from vgpu_bridge.kube import KubeApi
    from vgpu_bridge.webhook.app import build

    env = {**TLS, "VGPU_BRIDGE_PROFILE": "nvidia", "VGPU_BRIDGE_NVIDIA_CONSUMABLE_SHARES": mode}
    admitter, inventory, _ = build(Settings.from_env(env), KubeApi.connect_on_first_use(None))
    profile = admitter.profile
    assert (profile.driver, profile.device_class) == ("gpu.nvidia.com", "gpu.nvidia.com")
    assert (profile.shares_per_card, profile.cores_capacity) == (shares, booked_in)
    assert profile.enforcer_driver == "enforcer.vgb.io"
    assert admitter.quotas is not None
    assert admitter.quotas.profile is profile
    assert inventory._driver == "gpu.nvidia.com"
