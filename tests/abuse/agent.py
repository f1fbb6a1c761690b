"""The real `vgpu-bridge node` process with mock GPUs, against the loopback API stand-in, in a
short temp dir (AF_UNIX paths must stay under 108 bytes), and gRPC clients for its sockets."""

from __future__ import annotations

import http.client
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from tests.abuse.fake_api import FakeApi
from tests.abuse.processes import command, free_port, running, wait_until
from tests.unit.node.claims import NODE, allocated_claim, result
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.kubeletapi import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)

MOCK_GPUS = """\
- {uuid: GPU-aaaa, productName: NVIDIA H100 80GB HBM3, memory: 80Gi}
- {uuid: GPU-bbbb, productName: NVIDIA H100 80GB HBM3, memory: 80Gi}
"""
CALL_DEADLINE_S = 60.0  # one gRPC call, however hostile (the kubelet itself allows 45 s)
PROBE_DEADLINE_S = 5.0


@dataclass
class AgentDirs:
    """`base/agent/…` is the agent's; the rest of `base` is where canaries live."""

    base: Path

    @property
    def root(self) -> Path:
        return self.base / "agent"

    @property
    def plugin(self) -> Path:
        return self.root / "plugins"

    @property
    def checkpoint(self) -> Path:
        return self.plugin / "checkpoint.json"

    @property
    def cdi(self) -> Path:
        return self.root / "cdi"

    @property
    def vgpu(self) -> Path:
        return self.root / "vgpu"

    def claim_dir(self, uid: str) -> Path:
        return self.vgpu / "claims" / uid


@contextmanager
def agent_dirs() -> Iterator[AgentDirs]:
    base = Path(tempfile.mkdtemp(prefix="vb-abuse-", dir="/tmp"))
    try:
        (base / "agent").mkdir()
        yield AgentDirs(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class Agent:
    dirs: AgentDirs
    process: subprocess.Popen[bytes]
    metrics_port: int
    log_file: Path

    def dra(self) -> dra_v1_pb2_grpc.DRAPluginStub:
        return dra_v1_pb2_grpc.DRAPluginStub(
            grpc.insecure_channel(f"unix:{self.dirs.plugin}/dra.sock")
        )

    def registration_info(self) -> str:
        socket = self.dirs.root / "registry" / f"{DEFAULT.driver}-reg.sock"
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(
            grpc.insecure_channel(f"unix:{socket}")
        )
        info = stub.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=PROBE_DEADLINE_S)
        return str(info.name)

    def http(self, path: str, timeout: float = PROBE_DEADLINE_S) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def prepare(
        self, claims: list[dra_v1_pb2.Claim]
    ) -> dict[str, dra_v1_pb2.NodePrepareResourceResponse]:
        request = dra_v1_pb2.NodePrepareResourcesRequest(claims=claims)
        answer = self.dra().NodePrepareResources(request, timeout=CALL_DEADLINE_S)
        return dict(answer.claims)

    def unprepare(self, claims: list[dra_v1_pb2.Claim]) -> dict[str, str]:
        request = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=claims)
        answer = self.dra().NodeUnprepareResources(request, timeout=CALL_DEADLINE_S)
        return {uid: a.error for uid, a in answer.claims.items()}

    def serves(self) -> bool:
        """Registration answers and /healthz is 200 (False while either is not there yet)."""
        try:
            return self.registration_info() == DEFAULT.driver and self.http("/healthz")[0] == 200
        except (grpc.RpcError, OSError):
            return False


def claim(api: FakeApi, name: str, *, device: str = "gpu-0") -> dra_v1_pb2.Claim:
    """A claim the API stand-in serves, allocated on this node; the kubelet's reference to it."""
    uid = str(uuid.uuid4())
    share = result(device, memory="1000Mi", cores="10", share_id=str(uuid.uuid4()))
    with api.lock:
        api.claims[name] = allocated_claim(share, uid=uid, name=name, node=NODE)
    return dra_v1_pb2.Claim(namespace="team-a", name=name, uid=uid)


@contextmanager
def running_agent(
    dirs: AgentDirs, api: FakeApi, *, mock_gpus: str = MOCK_GPUS, extra_args: tuple[str, ...] = ()
) -> Iterator[Agent]:
    mock = dirs.base / "gpus.yaml"
    mock.write_text(mock_gpus)
    port = free_port()
    log_file = dirs.base / f"agent-{port}.log"
    args = command(
        "node", "--node-name", NODE, "--plugin-dir", str(dirs.plugin),
        "--registry-dir", str(dirs.root / "registry"), "--cdi-dir", str(dirs.cdi),
        "--vgpu-dir", str(dirs.vgpu), "--mock-gpus", str(mock),
        "--kubeconfig", str(api.kubeconfig(dirs.base)), "--metrics-listen", f"127.0.0.1:{port}",
        "--cleanup-seconds", "3600", *extra_args,
    )  # fmt: skip
    with running(args, log_file) as process:
        agent = Agent(dirs, process, port, log_file)
        wait_until(agent.serves, process, log_file, "node agent")
        yield agent
