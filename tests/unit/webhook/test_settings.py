"""Webhook settings: every flag is also `VGPU_BRIDGE_<FLAG>`; a flag wins over the env var."""

from __future__ import annotations

import pytest

from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.webhook.settings import Settings

TLS = {"VGPU_BRIDGE_TLS_CERT_FILE": "/tls/crt", "VGPU_BRIDGE_TLS_KEY_FILE": "/tls/key"}


def test_settings_come_from_env_alone() -> None:
    env = {**TLS, "VGPU_BRIDGE_LISTEN": "127.0.0.1:9443", "VGPU_BRIDGE_SWEEP_GRACE_SECONDS": "30"}
    settings = Settings.from_env(env)
    assert settings.host_port == ("127.0.0.1", 9443)
    assert settings.sweep_grace_seconds == 30
    assert settings.tls_cert_file == "/tls/crt"


def test_a_flag_wins_over_its_env_var() -> None:
    env = {**TLS, "VGPU_BRIDGE_PROFILE": "hami"}
    settings = Settings.from_args(["--profile", "default", "--listen", "[::1]:8443"], env)
    assert settings.profile == "default"
    assert settings.host_port == ("::1", 8443)


def test_own_namespace_is_always_excluded() -> None:
    settings = Settings.from_env({**TLS, "VGPU_BRIDGE_NAMESPACE": "gpu-system"})
    assert settings.excluded() == frozenset({"kube-system", "gpu-system"})


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({}, "tls_cert_file"),
        ({**TLS, "VGPU_BRIDGE_DEFAULT_CORES": "150"}, "default_cores"),
        ({**TLS, "VGPU_BRIDGE_MAX_BODY_BYTES": "lots"}, "max_body_bytes"),
    ],
)
def test_bad_settings_name_the_field(env: dict[str, str], field: str) -> None:
    with pytest.raises(SettingsError, match=field):
        Settings.from_env(env)
