"""The webhook's optional plain-HTTP listener over a real loopback socket: /metrics, /healthz and
/readyz answer there without TLS; /mutate and /bookings never do."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.webhook_harness import REVIEW, RunningWebhook, running_webhook
from vgpu_bridge.webhook.settings import Settings


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[RunningWebhook]:
    with running_webhook(tmp_path, metrics_listen="127.0.0.1:0") as running:
        yield running


def translated(metrics: bytes) -> float:
    found = re.search(
        rb'^vgpu_bridge_admissions_total\{decision="translated"\} (\S+)$', metrics, re.M
    )
    return float(found.group(1)) if found else 0.0


def test_metrics_answer_on_the_plain_port_and_count_https_admissions(
    webhook: RunningWebhook,
) -> None:
    assert webhook.probes is not None
    assert webhook.probes.server_address[1] != webhook.port
    assert webhook.post(REVIEW)[0] == 200  # over HTTPS
    status, metrics = webhook.plain("GET", "/metrics")
    assert status == 200
    assert translated(metrics) == 1
    assert b"vgpu_bridge_admission_duration_seconds_bucket" in metrics


def test_health_and_readiness_answer_on_the_plain_port(webhook: RunningWebhook) -> None:
    assert webhook.plain("GET", "/healthz") == (200, b"ok")
    assert webhook.plain("GET", "/readyz") == (503, b"not ready")
    webhook.ready.set()  # the inventory has synced
    assert webhook.plain("GET", "/readyz") == (200, b"ok")


def test_mutate_is_not_served_without_tls(webhook: RunningWebhook) -> None:
    assert webhook.plain("POST", "/mutate", REVIEW) == (404, b"not found")
    assert webhook.plain("GET", "/mutate")[0] == 404
    assert webhook.plain("POST", "/mutate?timeout=10s", REVIEW)[0] == 404
    assert translated(webhook.plain("GET", "/metrics")[1]) == 0  # nothing was admitted
    assert webhook.post(REVIEW)[0] == 200  # the HTTPS port still admits


def test_the_plain_listener_is_off_unless_asked_for(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"VGPU_BRIDGE_TLS_CERT_FILE": "c", "VGPU_BRIDGE_TLS_KEY_FILE": "k"}
    )
    assert settings.metrics_host_port is None
    with running_webhook(tmp_path) as running:
        assert running.probes is None
    on = Settings.from_env(
        {"VGPU_BRIDGE_TLS_CERT_FILE": "c", "VGPU_BRIDGE_TLS_KEY_FILE": "k",
         "VGPU_BRIDGE_METRICS_LISTEN": "0.0.0.0:9402"}
    )  # fmt: skip
    assert on.metrics_host_port == ("0.0.0.0", 9402)


def test_bookings_are_not_served_without_tls(webhook: RunningWebhook) -> None:
    """Issue 35 item 8: the plain listener served /bookings with no check at all; the status
    view reads it through the service proxy to the HTTPS port."""
    assert webhook.plain("GET", "/bookings") == (404, b"not found")
    assert webhook.get("/bookings")[0] in (200, 503)  # the HTTPS port still serves it
