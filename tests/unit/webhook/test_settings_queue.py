"""The worker queue's bounds are settings like any other (issue 25), handed to the server."""

from __future__ import annotations

import pytest

from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.webhook.connections import Limits
from vgpu_bridge.webhook.settings import Settings

TLS = {"VGPU_BRIDGE_TLS_CERT_FILE": "/tls/crt", "VGPU_BRIDGE_TLS_KEY_FILE": "/tls/key"}


def test_the_queue_bounds_reach_the_servers_limits() -> None:
    env = {**TLS, "VGPU_BRIDGE_MAX_QUEUED_REVIEWS": "16",
           "VGPU_BRIDGE_MAX_QUEUED_BYTES": str(8 * 2**20)}  # fmt: skip
    limits = Settings.from_env(env).limits()
    assert (limits.max_queued, limits.max_queued_bytes) == (16, 8 * 2**20)


def test_the_default_bounds_are_the_servers_defaults() -> None:
    limits = Settings.from_env(TLS).limits()
    assert (limits.max_queued, limits.max_queued_bytes) == (
        Limits().max_queued,
        Limits().max_queued_bytes,
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [("MAX_QUEUED_REVIEWS", "0"), ("MAX_QUEUED_BYTES", "1000"), ("MAX_QUEUED_REVIEWS", "many")],
)
def test_a_bad_queue_bound_names_the_field(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name.lower()):
        Settings.from_env({**TLS, f"VGPU_BRIDGE_{name}": value})
