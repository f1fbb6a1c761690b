"""`vgpu-bridge node` as a real process with mock GPUs, and the kubelet stand-in's DRA step that
calls it over its real unix sockets (`GrpcPreparer`)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from e2e.cluster import BoundPod, KubeClient
from e2e.cluster.client import Json
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc, pluginregistration_v1_pb2
from vgpu_bridge.node.kubeletapi import pluginregistration_v1_pb2_grpc as registration_grpc

RESOURCE = "/apis/resource.k8s.io/v1"


def published_devices(kube: KubeClient, node: str) -> dict[str, Json]:
    """The devices our driver's agent on `node` published (by name), once it has (20 s at most)."""
    selector = f"spec.nodeName={node},spec.driver={DEFAULT.driver}"
    slices = wait_for(
        lambda: kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector) or None,
        timeout_s=20,
        what="the agent's slices",
    )
    return {d["name"]: d for s in slices for d in s["spec"]["devices"]}


def remove_node(kube: KubeClient, node: str, driver: str = DEFAULT.driver) -> None:
    """A test's fake Node and the slices `driver` published for it."""
    kube.delete(f"/api/v1/nodes/{node}")
    selector = f"spec.nodeName={node},spec.driver={driver}"
    for item in kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector):
        kube.delete(f"{RESOURCE}/resourceslices/{item['metadata']['name']}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class AgentProcess:
    node: str
    root: Path  # short: AF_UNIX paths must stay under 108 bytes
    kubeconfig: Path
    gpus: list[dict[str, str]] | None  # None: no mock inventory (enforcer mode publishes no GPU)
    driver: str = DEFAULT.driver  # another name goes to the agent as VGPU_BRIDGE_DRIVER_NAME
    metrics_port: int = field(default_factory=free_port)
    extra_env: dict[str, str] = field(default_factory=dict)  # more VGPU_BRIDGE_* settings
    process: subprocess.Popen[bytes] | None = None

    @property
    def dra_socket(self) -> Path:
        return self.root / "plugins" / self.driver / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.root / "registry" / f"{self.driver}-reg.sock"

    @property
    def layout(self) -> CdiLayout:
        return CdiLayout(cdi_dir=self.root / "cdi", vgpu_dir=self.root / "vgpu", driver=self.driver)

    @property
    def log_file(self) -> Path:
        return self.root / "agent.log"

    def log(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""

    def start(self) -> None:
        # flags for some settings, env vars for others: both paths are exercised
        environ = {
            "VGPU_BRIDGE_CDI_DIR": str(self.root / "cdi"),
            "VGPU_BRIDGE_VGPU_DIR": str(self.root / "vgpu"),
            "VGPU_BRIDGE_RESYNC_SECONDS": "1",
        }
        if self.gpus is not None:
            environ["VGPU_BRIDGE_MOCK_GPUS"] = json.dumps(self.gpus)  # inline YAML (JSON is YAML)
        if self.driver != DEFAULT.driver:  # the default goes unsaid, as most installs leave it
            environ["VGPU_BRIDGE_DRIVER_NAME"] = self.driver
        environ.update(self.extra_env)
        command = [
            sys.executable, "-m", "vgpu_bridge.cli", "node",
            "--node-name", self.node,
            "--plugin-dir", str(self.dra_socket.parent),
            "--registry-dir", str(self.registration_socket.parent),
            "--kubeconfig", str(self.kubeconfig),
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
        ]  # fmt: skip
        with self.log_file.open("a") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env={**_base_env(), **environ}
            )
        wait_for(self.serving, timeout_s=90, what=f"the agent's sockets\n{self.log()[-3000:]}")

    def serving(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise AssertionError(f"the agent exited:\n{self.log()[-3000:]}")
        if not self.registration_socket.exists():
            return False
        with grpc.insecure_channel(f"unix:{self.registration_socket}") as channel:
            try:
                registration_grpc.RegistrationStub(channel).GetInfo(
                    pluginregistration_v1_pb2.InfoRequest(), timeout=2
                )
            except grpc.RpcError:
                return False
        return True

    def stop(self) -> int | None:
        """SIGTERM, as the kubelet stops a pod; the exit code (None when it was not running)."""
        if self.process is None:
            return None
        self.process.terminate()
        try:
            code = self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.process = None
        return code


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("VGPU_BRIDGE_")}


@contextmanager
def running_agent(
    node: str,
    kubeconfig: Path,
    gpus: list[dict[str, str]] | None,
    *,
    driver: str = DEFAULT.driver,
    extra_env: dict[str, str] | None = None,
) -> Iterator[AgentProcess]:
    """`vgpu-bridge node` for `node` with mock `gpus` (None: none, as in enforcer mode), as DRA
    driver `driver`, with `extra_env` (`VGPU_BRIDGE_*` settings) besides."""
    root = Path(tempfile.mkdtemp(prefix="vb-agent-", dir="/tmp"))
    agent = AgentProcess(node, root, kubeconfig, gpus, driver, extra_env=dict(extra_env or {}))
    try:
        agent.start()
        yield agent
    finally:
        agent.stop()
        print(agent.log()[-4000:])  # shown by pytest for failed tests
        shutil.rmtree(root, ignore_errors=True)


class PrepareFailed(RuntimeError):
    """The agent answered a claim with an error (the kubelet would retry the pod start)."""


class GrpcPreparer:
    """The kubelet's DRA manager for the stand-in: one NodePrepareResources per pod with all
    its claims, over the agent's DRA socket; a claim shared by pods is unprepared only when
    the last of them goes, as the kubelet does."""

    def __init__(self, dra_socket: Path) -> None:
        self._channel = grpc.insecure_channel(f"unix:{dra_socket}")
        self._stub = dra_v1_pb2_grpc.DRAPluginStub(self._channel)
        self._users: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self.answers: dict[str, dra_v1_pb2.NodePrepareResourceResponse] = {}

    def prepare(self, pod: BoundPod) -> None:
        claims = [
            dra_v1_pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in pod.claims
        ]
        response = self._stub.NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=claims), timeout=45
        )
        missing = {c.uid for c in claims} - set(response.claims)
        if missing:
            raise PrepareFailed(f"no answer for claims {sorted(missing)}")
        errors = {uid: a.error for uid, a in response.claims.items() if a.error}
        if errors:
            raise PrepareFailed(f"prepare failed: {errors}")
        with self._lock:
            for claim in claims:
                self._users.setdefault(claim.uid, set()).add(pod.uid)
                self.answers[claim.uid] = response.claims[claim.uid]

    def unprepare(self, pod: BoundPod) -> None:
        with self._lock:
            last = [c for c in pod.claims if self._users.get(c.uid, set()) <= {pod.uid}]
        claims = [dra_v1_pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in last]
        if claims:
            response = self._stub.NodeUnprepareResources(
                dra_v1_pb2.NodeUnprepareResourcesRequest(claims=claims), timeout=45
            )
            errors = {uid: a.error for uid, a in response.claims.items() if a.error}
            if errors or set(response.claims) != {c.uid for c in claims}:
                raise PrepareFailed(f"unprepare failed: {errors or dict(response.claims)}")
        with self._lock:
            for claim in pod.claims:
                self._users.get(claim.uid, set()).discard(pod.uid)

    def close(self) -> None:
        self._channel.close()


class PreparerByNode:
    """Routes each pod to the agent of its node, as each kubelet talks to its own agent."""

    def __init__(self, preparers: dict[str, GrpcPreparer]) -> None:
        self._preparers = preparers

    def prepare(self, pod: BoundPod) -> None:
        self._preparers[pod.node_name].prepare(pod)

    def unprepare(self, pod: BoundPod) -> None:
        self._preparers[pod.node_name].unprepare(pod)

    def close(self) -> None:
        for preparer in self._preparers.values():
            preparer.close()
