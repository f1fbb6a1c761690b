"""`vgpu-bridge node` refuses bad settings and unreadable GPUs with a message, not a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli_runner import run_cli


def test_without_a_node_name_it_says_which_flag_and_env_var_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("VGPU_BRIDGE_NODE_NAME", raising=False)
    result = run_cli(["node"])
    assert result.code == 2
    assert "--node-name (VGPU_BRIDGE_NODE_NAME): required" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_mock_gpu_file_stops_the_agent_with_its_reason(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("- {uuid: GPU-a, productName: X, memory: 1Ki}\n")
    result = run_cli(["node", "--node-name", "n", "--mock-gpus", str(gpus)])
    assert result.code == 1
    assert f"cannot start: {gpus}: [0]: memory:" in result.stderr
