"""The two long-running binaries turn bad settings and an unusable kubeconfig into one line on
stderr naming the flag (or file) and the reason, with exit 2 (settings) or 1 (cannot start):
never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpu_bridge import cli


@pytest.fixture(autouse=True)
def no_bridge_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("VGPU_BRIDGE_"):
            monkeypatch.delenv(name)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err


def test_webhook_names_each_missing_setting(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["webhook"], capsys)
    assert code == 2
    assert "vgpu-bridge webhook: --tls-cert-file (VGPU_BRIDGE_TLS_CERT_FILE): required" in err
    assert "--tls-key-file (VGPU_BRIDGE_TLS_KEY_FILE): required" in err


@pytest.mark.parametrize(
    ("flag", "value", "reason"),
    [
        ("--profile", "nope", "must be one of 'default', 'hami', 'nvidia', got 'nope'"),
        ("--listen", "localhost:99999", "'localhost:99999' is not HOST:PORT"),
        ("--metrics-listen", ":http", "':http' is not HOST:PORT"),
        ("--sweep-grace-seconds", "-1", "must be at least 0, got -1"),
    ],
)
def test_webhook_names_a_bad_value(
    flag: str, value: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["webhook", "--tls-cert-file", "c", "--tls-key-file", "k", flag, value]
    code, err = run(argv, capsys)
    assert code == 2
    env = "VGPU_BRIDGE_" + flag[2:].replace("-", "_").upper()
    assert err == f"vgpu-bridge webhook: {flag} ({env}): {reason}\n"


@pytest.mark.parametrize("binary", ["webhook", "node"])
def test_an_unreadable_kubeconfig_is_named(
    binary: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")  # no context
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("- {uuid: GPU-1, productName: Fake, memory: 1Gi}\n")
    argv = {
        "webhook": ["webhook", "--tls-cert-file", "c", "--tls-key-file", "k"],
        "node": ["node", "--node-name", "n", "--mock-gpus", str(gpus)],
    }[binary] + ["--kubeconfig", str(kubeconfig)]
    code, err = run(argv, capsys)
    assert code == 1
    assert err.startswith(
        f"vgpu-bridge {binary}: cannot start: cannot read --kubeconfig {kubeconfig}: "
    )


def test_the_node_agent_names_a_bad_listen_address(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(["node", "--node-name", "n", "--metrics-listen", "localhost:99999"], capsys)
    assert code == 2
    assert err == (
        "vgpu-bridge node: --metrics-listen (VGPU_BRIDGE_METRICS_LISTEN): "
        "'localhost:99999' is not HOST:PORT\n"
    )
