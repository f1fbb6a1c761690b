"""A restarted webhook answers reviews that need no API before it has read its kubeconfig (the
Kubernetes client loads in the background), and still exits 1 naming a kubeconfig it then
finds unusable. The kubeconfig is a FIFO, so the test decides when it can be read."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.webhook_harness import REVIEW, WebhookProcess, webhook_process

NO_CONTEXT = "apiVersion: v1\nkind: Config\nclusters: []\n"


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)  # reading it blocks until the test writes to it
    return fifo


@pytest.fixture
def webhook(tmp_path: Path, kubeconfig: Path) -> Iterator[WebhookProcess]:
    # not required alive: the second test makes it exit, and each test says what it expects
    with webhook_process(tmp_path, kubeconfig=kubeconfig, require_alive=False) as running:
        yield running


def review(webhook: WebhookProcess, body: bytes) -> dict[str, Any]:
    conn = webhook.connection()
    try:
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        answer: dict[str, Any] = json.loads(response.read())["response"]
        return answer
    finally:
        conn.close()


def test_a_review_is_answered_while_the_kubeconfig_is_unread(
    webhook: WebhookProcess, kubeconfig: Path
) -> None:
    assert webhook.process.poll() is None, webhook.output.read_text()
    answer = review(webhook, REVIEW)
    assert answer["allowed"] is True
    assert "patch" in answer  # translated: the pod now claims a share


def test_a_kubeconfig_found_unusable_after_start_still_exits_1_naming_it(
    webhook: WebhookProcess, kubeconfig: Path
) -> None:
    assert webhook.process.poll() is None, webhook.output.read_text()
    kubeconfig.write_text(NO_CONTEXT)  # the webhook's reader takes it now
    assert webhook.process.wait(timeout=60) == 1
    lines = webhook.lines()
    expected = f"vgpu-bridge webhook: cannot start: cannot read --kubeconfig {kubeconfig}: "
    assert any(line.startswith(expected) for line in lines), lines
    assert not any("Traceback" in line for line in lines), lines
