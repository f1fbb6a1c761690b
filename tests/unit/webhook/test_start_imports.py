"""A restarted webhook replica loads only what answering reviews needs: the CLI builds the
webhook's flags alone, and the Kubernetes client loads after the server is up, in the
background. Checked in a fresh interpreter, as the binary starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

START_PATH = """
import contextlib, io, sys
from vgpu_bridge import cli
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    cli.main(["webhook", "--help"])
import vgpu_bridge.webhook.app
print(" ".join(sorted(sys.modules)))
"""


@pytest.fixture(scope="module")
def loaded() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", START_PATH], capture_output=True, text=True, check=True
    )
    return set(done.stdout.split())


@pytest.mark.parametrize(
    "module",
    [
        pytest.param("kubernetes", id="the-kubernetes-client"),
        pytest.param("urllib3", id="its-connection-pool"),
        pytest.param("tenacity", id="the-api-retry-library"),
        pytest.param("yaml", id="the-translate-commands-yaml-reader"),
        pytest.param("vgpu_bridge.translate_command", id="the-translate-command"),
        pytest.param("vgpu_bridge.node.settings", id="the-node-agents-settings"),
    ],
)
def test_the_webhook_start_path_does_not_import(module: str, loaded: set[str]) -> None:
    assert module not in loaded


def test_the_start_path_is_the_webhooks(loaded: set[str]) -> None:
    assert {"vgpu_bridge.webhook.app", "vgpu_bridge.webhook.settings"} <= loaded
