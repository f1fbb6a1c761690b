"""The agent's `--log-level` (env VGPU_BRIDGE_LOG_LEVEL): lines below it are dropped from the
first line of a start. Each case starts the binary's entry point in a fresh interpreter, with
mock GPUs; the connection to the API is where it is stopped, after one debug and one info line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

START_UNTIL_THE_API = """
import sys
from vgpu_bridge import cli, logs
from vgpu_bridge.node import app

log = logs.get_logger("vgpu_bridge.node.test")

def connect_here(*_args, **_kwargs):
    log.debug("a debug line")
    log.info("an info line")
    raise OSError("stopped where the agent connects")

app.KubeApi.connect = connect_here
gpus = "[{uuid: GPU-a, productName: H100, memory: 80Gi}]"
sys.exit(cli.main(["node", "--node-name", "n", "--mock-gpus", gpus, *sys.argv[1:]]))
"""


def events_logged(*flags: str, env: dict[str, str] | None = None) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", START_UNTIL_THE_API, *flags],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert "stopped where the agent connects" in done.stderr, done.stderr
    return [json.loads(line)["event"] for line in done.stdout.splitlines()]


def test_by_default_a_debug_line_is_dropped_and_an_info_line_kept() -> None:
    assert events_logged() == ["an info line"]


def test_at_log_level_debug_the_debug_line_is_written() -> None:
    assert events_logged("--log-level", "debug") == ["a debug line", "an info line"]


def test_the_env_var_sets_the_level_too() -> None:
    assert events_logged(env={"VGPU_BRIDGE_LOG_LEVEL": "error"}) == []
