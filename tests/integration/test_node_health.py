"""The agent's /healthz over real HTTP, with its gRPC servers on real unix sockets and a slice
publisher against an API server in a dict: 200 while all is well, 503 with the reason when a
socket is gone or dead, the server stopped, or no publication has succeeded for too long."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry

from tests.integration.node_harness import RunningAgent, agent_dirs, running_agent
from tests.unit.node.claims import GPUS, NODE
from tests.unit.node.fake_api import FakeApi
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeError
from vgpu_bridge.node.health import Health
from vgpu_bridge.node.metrics import serve_metrics
from vgpu_bridge.node.publisher import PublishError, SlicePublisher


class Clock:
    """The publisher's and /healthz's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Agent:
    running: RunningAgent
    api: FakeApi
    publisher: SlicePublisher
    port: int
    clock: Clock

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def healthz(self) -> tuple[int, dict[str, str]]:
        status, body = self.get("/healthz")
        assert body.splitlines(keepends=True) == [body], body  # one line of JSON
        answer: dict[str, str] = json.loads(body)
        return status, answer


@pytest.fixture
def agent() -> Iterator[Agent]:
    with agent_dirs() as dirs, running_agent(dirs, GPUS, node=NODE) as running:
        api, clock = FakeApi(), Clock()
        publisher = SlicePublisher(api, node=NODE, profile=DEFAULT, gpus=GPUS, clock=clock)
        health = Health(
            sockets=lambda: running.server.problem(timeout_s=0.5),
            publications=lambda: publisher.last,
            max_silence_s=60,
            clock=clock,
        )
        server = serve_metrics(
            ("127.0.0.1", 0),
            registry=CollectorRegistry(),
            health=health,
            state=running.state,
            gpus=GPUS,
            node=NODE,
            vgpu_dir=dirs.layout.vgpu_dir,
            host_pids=lambda _uid: {},
        )
        assert server is not None
        try:
            yield Agent(running, api, publisher, server.server_port, clock)
        finally:
            server.shutdown()
            server.server_close()


def test_healthy_before_the_first_publication_and_after_a_good_one(agent: Agent) -> None:
    assert agent.healthz() == (200, {"status": "ok"})
    agent.publisher.sync()
    assert agent.api.slices
    assert agent.healthz() == (200, {"status": "ok"})
    status, metrics = agent.get("/metrics")
    assert status == 200
    assert b"vgpu_bridge_gpu_memory_bytes{" in metrics


def test_failed_publications_are_unhealthy_only_past_the_grace(agent: Agent) -> None:
    agent.publisher.sync()
    agent.api.broken = KubeError("PUT", "/apis/...", 500, "etcdserver: request timed out")
    agent.clock.now += 30
    with pytest.raises(PublishError):
        agent.publisher.sync()
    assert agent.healthz() == (200, {"status": "ok"})  # a short outage restarts nothing
    agent.clock.now += 31
    with pytest.raises(PublishError):
        agent.publisher.sync()
    status, answer = agent.healthz()
    assert status == 503
    assert answer["status"] == "unhealthy"
    assert answer["reason"].startswith(
        "no ResourceSlice publication has succeeded for 61 s since the last one (allowed: 60 s)"
    )
    assert "etcdserver: request timed out" in answer["reason"]
    agent.api.broken = None
    agent.publisher.sync()
    assert agent.healthz() == (200, {"status": "ok"})


def test_a_dra_socket_removed_under_the_running_agent_is_unhealthy(agent: Agent) -> None:
    agent.publisher.sync()
    agent.running.server.dra_socket.unlink()  # as a wiped kubelet plugin dir leaves it
    status, answer = agent.healthz()
    assert status == 503
    assert answer["reason"] == f"the DRA socket {agent.running.server.dra_socket} is gone"


def test_a_stopped_grpc_server_is_unhealthy(agent: Agent) -> None:
    agent.publisher.sync()
    agent.running.server.stop(grace_s=0)
    status, answer = agent.healthz()
    assert status == 503
    assert "socket" in answer["reason"]
    assert "is gone" in answer["reason"]


def test_a_socket_file_nobody_listens_on_is_unhealthy(agent: Agent) -> None:
    agent.publisher.sync()
    server = agent.running.server
    server.stop(grace_s=0)
    dead = socket.socket(socket.AF_UNIX)  # bound, never listening, closed: the file stays
    dead.bind(str(server.dra_socket))
    dead.close()
    status, answer = agent.healthz()
    assert status == 503
    assert answer["reason"] == (
        f"no gRPC server answers on the DRA socket {server.dra_socket} within 0.5 s"
    )


def test_a_registration_socket_that_is_no_grpc_server_is_unhealthy(agent: Agent) -> None:
    agent.publisher.sync()
    server = agent.running.server
    server.registration_socket.unlink()
    impostor = socket.socket(socket.AF_UNIX)  # accepts connections, never speaks HTTP/2
    impostor.bind(str(server.registration_socket))
    impostor.listen()
    try:
        status, answer = agent.healthz()
    finally:
        impostor.close()
    assert status == 503
    assert answer["reason"] == (
        f"no gRPC server answers on the registration socket {server.registration_socket} "
        "within 0.5 s"
    )
