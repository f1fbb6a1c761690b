"""Settings of the webhook's own certificate (`--tls-secret`): the configuration it keeps the
caBundle of is required with it, and every name is checked as the API would check it."""

from __future__ import annotations

import pytest

from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.webhook.settings import Settings

FILES = {"VGPU_BRIDGE_TLS_CERT_FILE": "/tls/tls.crt", "VGPU_BRIDGE_TLS_KEY_FILE": "/tls/tls.key"}
OWN = {
    **FILES,
    "VGPU_BRIDGE_TLS_SECRET": "vgpu-bridge-webhook-cert",
    "VGPU_BRIDGE_TLS_WEBHOOK_CONFIGURATION": "gpu-sharing-vgpu-bridge",
}


def test_without_a_secret_the_files_are_only_read() -> None:
    settings = Settings.from_env(FILES)
    assert settings.tls_secret is None
    assert settings.tls_webhook_configuration is None


def test_the_chart_env_of_the_default_mode_is_accepted() -> None:
    settings = Settings.from_env({**OWN, "VGPU_BRIDGE_TLS_SERVICE": "vb-webhook"})
    assert settings.tls_secret == "vgpu-bridge-webhook-cert"
    assert settings.tls_webhook_configuration == "gpu-sharing-vgpu-bridge"
    assert settings.tls_service == "vb-webhook"
    assert settings.tls_check_seconds == 15


@pytest.mark.parametrize(
    ("env", "field", "says"),
    [
        pytest.param(
            {**FILES, "VGPU_BRIDGE_TLS_SECRET": "cert"},
            "tls_webhook_configuration",
            "required with --tls-secret",
            id="secret-without-configuration",
        ),
        pytest.param(
            {**OWN, "VGPU_BRIDGE_TLS_SECRET": "Not_A_Name"},
            "tls_secret",
            "DNS subdomain",
            id="secret-not-a-name",
        ),
        pytest.param(
            {**OWN, "VGPU_BRIDGE_TLS_SERVICE": "a.b"},
            "tls_service",
            "DNS label",
            id="service-not-a-label",
        ),
        pytest.param(
            {**OWN, "VGPU_BRIDGE_TLS_CHECK_SECONDS": "0"},
            "tls_check_seconds",
            "at least 1",
            id="check-never",
        ),
    ],
)
def test_bad_values_name_the_field_and_the_reason(
    env: dict[str, str], field: str, says: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env(env)
    assert any(name == field and says in reason for name, reason in refused.value.problems), (
        refused.value.problems
    )
