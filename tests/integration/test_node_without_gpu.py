"""`vgpu-bridge node` on this machine, which has no NVIDIA driver: the real process waits,
healthy and idle, serving /healthz and /metrics, and exits 0 on SIGTERM (`node/no_gpu.py`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.waiting_agent import first_healthz, get
from tests.integration.webhook_harness import free_port

AGENT = Path(sys.executable).parent / "vgpu-bridge"


def test_the_agent_on_a_node_without_nvml_waits_healthy_and_exits_0_on_sigterm() -> None:
    port = free_port()
    env = {**os.environ, "VGPU_BRIDGE_NODE_NAME": "cpu-node"}
    env.pop("VGPU_BRIDGE_MOCK_GPUS", None)
    process = subprocess.Popen(
        [str(AGENT), "node", "--metrics-listen", f"127.0.0.1:{port}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        status, body = first_healthz(process, port)
        assert status == 200
        assert json.loads(body)["waiting"].startswith("NVML is unavailable")
        assert "vgpu_bridge_agent_waiting_for_gpus 1.0" in get(port, "/metrics")[1]
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0]
        assert process.returncode == 0, output
        assert "no GPU on this node: waiting" in output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
