"""The launcher's contract (DESIGN §4) and its promise to leave nothing behind, however it ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml

from e2e.cluster import LocalCluster, Settings
from e2e.cluster.processes import Running, listeners, runs_binary
from e2e.cluster.session import sweep_stale
from e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]


def launcher(command: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "e2e.cluster", command],
        cwd=REPO,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def wait_gone(component: Running) -> None:
    wait_for(lambda: not component.alive(), timeout_s=15, what=f"{component.name} gone")


def assert_left_nothing(cluster: LocalCluster) -> None:
    for component in cluster.components:
        wait_gone(component)
    for port in vars(cluster.ports).values():
        # other programs on this machine may reuse the number by now, never our binary
        holders = [pid for pid in listeners(port) if runs_binary(pid, cluster.binary)]
        assert not holders, f"port {port} still held by {holders}"
    assert not cluster.state_dir.exists()


@pytest.fixture
def launcher_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The launcher's environment with its own state directory; ``down`` runs even on failure."""
    env = {**os.environ, "VGPU_BRIDGE_STATE": str(tmp_path / "state")}
    yield env
    launcher("down", env)


def test_up_ends_with_the_kubeconfig_export_and_down_leaves_nothing_behind(
    launcher_env: dict[str, str],
) -> None:
    up = launcher("up", launcher_env)
    assert up.returncode == 0, up.stderr
    last = up.stdout.strip().splitlines()[-1]
    assert last.startswith("export KUBECONFIG=")
    kubeconfig = Path(last.removeprefix("export KUBECONFIG="))
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert server.startswith("https://127.0.0.1:")
    cluster = LocalCluster.load(Path(launcher_env["VGPU_BRIDGE_STATE"]))
    assert cluster is not None
    assert cluster.client().get("/version")["gitVersion"] == Settings.from_env().k8s_version

    again = launcher("up", launcher_env)  # reuses the healthy cluster
    assert again.stdout.strip().splitlines()[-1] == last
    assert launcher("status", launcher_env).returncode == 0

    down = launcher("down", launcher_env)

    assert down.returncode == 0, down.stderr
    assert_left_nothing(cluster)
    assert launcher("status", launcher_env).returncode == 1


SESSION_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from e2e.cluster import Settings, running_cluster
    with running_cluster(Settings.from_env()) as cluster:
        print(json.dumps(str(cluster.state_dir)), flush=True)
        time.sleep(300)
    """
)


def start_session(env: Mapping[str, str]) -> tuple[subprocess.Popen[str], LocalCluster]:
    process = subprocess.Popen(
        [sys.executable, "-c", SESSION_SCRIPT],
        cwd=REPO,
        env=dict(env),
        stdout=subprocess.PIPE,
        text=True,
        # A shell that starts `make test` in the background (`&`, nohup) ignores SIGINT, and
        # the ignoring is inherited: Python then installs no KeyboardInterrupt for Ctrl-C.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stdout is not None
    state_dir = Path(json.loads(process.stdout.readline()))
    cluster = LocalCluster.load(state_dir)
    assert cluster is not None
    assert cluster.healthy()
    return process, cluster


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_session_stops_every_component_and_removes_its_state(
    signum: signal.Signals,
) -> None:
    process, cluster = start_session(os.environ)

    process.send_signal(signum)
    process.wait(timeout=60)

    assert_left_nothing(cluster)


def test_killed_session_takes_its_components_along_and_the_next_one_sweeps_its_state() -> None:
    process, cluster = start_session(os.environ)

    process.kill()
    process.wait(timeout=60)

    for component in cluster.components:  # the kernel kills them with their parent
        wait_gone(component)
    assert cluster.state_dir.exists()
    assert cluster.state_dir in sweep_stale(cluster.state_dir.parent)
    assert_left_nothing(cluster)


def test_a_recycled_pid_running_another_program_is_not_ours(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "30"])
    try:
        impostor = Running("etcd", other.pid, tmp_path / "log", Path("/nonexistent/vgpu-k8s"))
        assert not impostor.alive()
    finally:
        other.kill()
        other.wait()


def test_a_recycled_pid_running_our_binary_in_another_cluster_is_not_ours(
    e2e_cluster: LocalCluster,
) -> None:
    live = e2e_cluster.components[0]
    assert live.alive()
    stale = Running(live.name, live.pid, live.log, live.binary, started=live.started - 1)
    assert not stale.alive()
