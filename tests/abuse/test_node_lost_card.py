"""A lost card among healthy ones (issue 35, item 9): the real agent over a stand-in for NVML
(`fake_pynvml`) with eight cards; one falls off the bus and sends XID 79 at the same instant, so
that NVML can no longer give the UUID of the event's device. Only that card is marked unhealthy
(`vgpu_bridge_device_healthy` 0, the value of its taint as the reason), the seven others stay
healthy; found again, it keeps the XID, which NVML never takes back."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.abuse import fake_pynvml
from tests.abuse.agent import AgentDirs, agent_dirs
from tests.abuse.fake_api import FakeApi, fake_api
from tests.abuse.processes import free_port, running, wait_until
from tests.unit.node.claims import NODE

LOST = 3
#: the entry point, with `pynvml` replaced before anything imports it
BOOT = (
    "import sys; from tests.abuse import fake_pynvml; sys.modules['pynvml'] = fake_pynvml; "
    "from vgpu_bridge.cli import main; sys.exit(main())"
)
HEALTH = re.compile(r"vgpu_bridge_device_healthy\{([^}]*)\} ([0-9.]+)")
Health = dict[str, tuple[float, str]]  # device -> (vgpu_bridge_device_healthy, reason)


@dataclass
class NvmlAgent:
    process: subprocess.Popen[bytes]
    log_file: Path
    port: int
    state: Path

    def health(self) -> Health:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request("GET", "/metrics")
            metrics = conn.getresponse().read().decode()
        finally:
            conn.close()
        found = {}
        for labels, value in HEALTH.findall(metrics):
            pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            found[pairs["device"]] = (float(value), pairs["reason"])
        return found

    def nvml(self, *, lost: list[int], xids: list[tuple[int, int]]) -> None:
        """The fake NVML's state, replaced by one rename: every change lands at one instant."""
        staged = self.state.with_suffix(".new")
        staged.write_text(json.dumps({"lost": lost, "xids": xids}))
        staged.replace(self.state)

    def wait(self, check: Callable[[Health], bool], what: str) -> Health:
        wait_until(lambda: check(self.health()), self.process, self.log_file, what)
        return self.health()


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[NvmlAgent]:
    """The real agent on no mock GPUs: NVML's (the fake's) cards and events."""
    with fake_api() as api, agent_dirs() as dirs:
        state = dirs.base / "nvml.json"
        monkeypatch.setenv("VB_FAKE_NVML_STATE", str(state))
        with _running(dirs, api) as (process, log_file, port):
            yield NvmlAgent(process, log_file, port, state)


@contextmanager
def _running(dirs: AgentDirs, api: FakeApi) -> Iterator[tuple[subprocess.Popen[bytes], Path, int]]:
    port = free_port()
    log_file = dirs.base / "agent.log"
    args = [
        sys.executable, "-c", BOOT, "node", "--node-name", NODE,
        "--plugin-dir", str(dirs.plugin), "--registry-dir", str(dirs.root / "registry"),
        "--cdi-dir", str(dirs.cdi), "--vgpu-dir", str(dirs.vgpu),
        "--kubeconfig", str(api.kubeconfig(dirs.base)), "--metrics-listen", f"127.0.0.1:{port}",
        "--device-health-seconds", "0.2",
    ]  # fmt: skip
    with running(args, log_file) as process:
        yield process, log_file, port


def test_a_lost_card_among_healthy_ones_marks_only_itself(agent: NvmlAgent) -> None:
    agent.wait(lambda h: len(h) == fake_pynvml.CARDS, "the eight cards' health")
    agent.nvml(lost=[LOST], xids=[(LOST, 79)])
    lost = agent.wait(lambda h: h[f"gpu-{LOST}"][0] == 0.0, "the lost card marked")
    agent.nvml(lost=[], xids=[(LOST, 79)])
    found = agent.wait(lambda h: h[f"gpu-{LOST}"][1] == "xid-79", "the card found again")
    healthy = {f"gpu-{i}": (1.0, "") for i in range(fake_pynvml.CARDS) if i != LOST}
    assert lost == {**healthy, f"gpu-{LOST}": (0.0, "gpu-lost")}
    assert found == {**healthy, f"gpu-{LOST}": (0.0, "xid-79")}
