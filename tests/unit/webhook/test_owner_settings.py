"""`--webhook-configuration`: the configuration that owns what the webhook makes. The chart sets
it always; unset (the webhook run by hand) nothing gets an owner; with `--tls-secret` the
configuration whose caBundle we keep is the owner, and two different names are refused."""

from __future__ import annotations

import pytest

from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.webhook.settings import Settings

FILES = {"VGPU_BRIDGE_TLS_CERT_FILE": "/tls/tls.crt", "VGPU_BRIDGE_TLS_KEY_FILE": "/tls/tls.key"}


def test_unset_or_empty_nothing_is_owned() -> None:
    assert Settings.from_env(FILES).owner_configuration() == ""
    empty = {**FILES, "VGPU_BRIDGE_WEBHOOK_CONFIGURATION": ""}
    assert Settings.from_env(empty).owner_configuration() == ""


def test_the_chart_env_names_the_owner() -> None:
    env = {**FILES, "VGPU_BRIDGE_WEBHOOK_CONFIGURATION": "gpu-sharing-vgpu-bridge"}
    assert Settings.from_env(env).owner_configuration() == "gpu-sharing-vgpu-bridge"


def test_the_configuration_of_the_own_certificate_owns_too_when_no_other_is_named() -> None:
    env = {**FILES, "VGPU_BRIDGE_TLS_SECRET": "cert",
           "VGPU_BRIDGE_TLS_WEBHOOK_CONFIGURATION": "gpu-sharing"}  # fmt: skip
    assert Settings.from_env(env).owner_configuration() == "gpu-sharing"


@pytest.mark.parametrize(
    ("env", "field", "says"),
    [
        pytest.param(
            {"VGPU_BRIDGE_WEBHOOK_CONFIGURATION": "Not_A_Name"},
            "webhook_configuration",
            "must be a DNS subdomain",
            id="not-a-name",
        ),
        pytest.param(
            {
                "VGPU_BRIDGE_WEBHOOK_CONFIGURATION": "one",
                "VGPU_BRIDGE_TLS_SECRET": "cert",
                "VGPU_BRIDGE_TLS_WEBHOOK_CONFIGURATION": "other",
            },
            "tls_webhook_configuration",
            "must be --webhook-configuration one",
            id="two-configurations",
        ),
    ],
)
def test_a_bad_owner_is_refused_naming_the_setting(
    env: dict[str, str], field: str, says: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({**FILES, **env})
    assert [problem[0] for problem in raised.value.problems] == [field]
    assert says in str(raised.value)
