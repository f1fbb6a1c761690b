"""Both binaries' `--log-level` (env VGPU_BRIDGE_LOG_LEVEL): lines below it are dropped from the
first line of a start. Each case starts the binary's entry point in a fresh interpreter (the
agent with mock GPUs); where it connects to the API it logs one debug and one info line and is
stopped there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.webhook.settings import Settings

START_UNTIL_THE_API = """
import sys
from vgpu_bridge import cli, logs
from vgpu_bridge.{role} import app

log = logs.get_logger("vgpu_bridge.{role}.test")

def connect_here(*_args, **_kwargs):
    log.debug("a debug line")
    log.info("an info line")
    raise OSError("stopped where it connects")

app.KubeApi.{connect} = connect_here
sys.exit(cli.main({command} + sys.argv[1:]))
"""
BINARIES = {
    "node": START_UNTIL_THE_API.format(
        role="node",
        connect="connect",
        command=[
            "node",
            "--node-name",
            "n",
            "--mock-gpus",
            "[{uuid: GPU-a, productName: H100, memory: 80Gi}]",
        ],
    ),
    "webhook": START_UNTIL_THE_API.format(
        role="webhook",
        connect="connect_on_first_use",
        command=["webhook", "--tls-cert-file", "-", "--tls-key-file", "-"],
    ),
}


def events_logged(binary: str, *flags: str, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", BINARIES[binary], *flags],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert "stopped where it connects" in done.stderr, done.stderr
    return [json.loads(line)["event"] for line in done.stdout.splitlines()]


@pytest.mark.parametrize("binary", sorted(BINARIES))
def test_by_default_a_debug_line_is_dropped_and_an_info_line_kept(binary: str) -> None:
    assert events_logged(binary) == ["an info line"]


@pytest.mark.parametrize("binary", sorted(BINARIES))
def test_at_log_level_debug_the_debug_line_is_written(binary: str) -> None:
    assert events_logged(binary, "--log-level", "debug") == ["a debug line", "an info line"]


@pytest.mark.parametrize(("binary", "level"), [("node", "error"), ("webhook", "warning")])
def test_the_env_var_sets_the_level_too(binary: str, level: str) -> None:
    assert events_logged(binary, env={"VGPU_BRIDGE_LOG_LEVEL": level}) == []


def test_an_unknown_webhook_level_is_refused_naming_the_flag() -> None:
    env = {"VGPU_BRIDGE_TLS_CERT_FILE": "-", "VGPU_BRIDGE_TLS_KEY_FILE": "-"}
    with pytest.raises(SettingsError, match="log_level"):
        Settings.from_env({**env, "VGPU_BRIDGE_LOG_LEVEL": "verbose"})
