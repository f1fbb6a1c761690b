"""The node agent's gRPC servers on real unix sockets in a short temp dir, and clients for them.

The API server is unreachable here on purpose: these tests cover what needs no API call
(registration, answers from the checkpoint, Unprepare, recovery, per-claim errors when the API
cannot be asked). Preparing claims read from a real API server is tested in e2e/node.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from kubernetes import client

from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.node.app import build
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.grpc import PluginServer
from vgpu_bridge.node.kubeletapi import (
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2_grpc,
)
from vgpu_bridge.node.settings import Settings
from vgpu_bridge.node.state import DeviceState


def unreachable_api() -> KubeApi:
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:1"
    return KubeApi(client.ApiClient(configuration), timeout_s=0.5)


@dataclass
class AgentDirs:
    root: Path

    @property
    def plugin(self) -> Path:
        return self.root / "plugins" / DEFAULT.driver

    @property
    def registry(self) -> Path:
        return self.root / "registry"

    @property
    def layout(self) -> CdiLayout:
        return CdiLayout(
            cdi_dir=self.root / "cdi", vgpu_dir=self.root / "vgpu", driver=DEFAULT.driver
        )

    @property
    def checkpoint(self) -> Path:
        return self.plugin / "checkpoint.json"


@contextmanager
def agent_dirs(*, base: str = "/tmp") -> Iterator[AgentDirs]:
    """A short root: AF_UNIX paths must stay under 108 bytes, pytest's tmp_path may not.
    `base="/dev/shm"` for tests that make many files (a tmpfs: 50 times faster on a busy disk)."""
    root = Path(tempfile.mkdtemp(prefix="vb-node-", dir=base))
    try:
        yield AgentDirs(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class RunningAgent:
    dirs: AgentDirs
    state: DeviceState
    server: PluginServer

    def channel(self, socket: Path | None = None) -> grpc.Channel:
        return grpc.insecure_channel(f"unix:{socket or self.server.dra_socket}")

    def v1(self) -> dra_v1_pb2_grpc.DRAPluginStub:
        return dra_v1_pb2_grpc.DRAPluginStub(self.channel())

    def v1beta1(self) -> dra_v1beta1_pb2_grpc.DRAPluginStub:
        return dra_v1beta1_pb2_grpc.DRAPluginStub(self.channel())

    def registration(self) -> pluginregistration_v1_pb2_grpc.RegistrationStub:
        return pluginregistration_v1_pb2_grpc.RegistrationStub(
            self.channel(self.server.registration_socket)
        )


def agent_settings(dirs: AgentDirs, *, node: str) -> Settings:
    """The agent's settings for `dirs`: every path under its root, no /metrics listener."""
    return Settings(
        node_name=node,
        plugin_dir=dirs.plugin,
        registry_dir=dirs.registry,
        cdi_dir=dirs.root / "cdi",
        vgpu_dir=dirs.root / "vgpu",
        metrics_listen="",
    )


@contextmanager
def running_agent(
    dirs: AgentDirs, gpus: tuple[Gpu, ...], *, node: str, api: KubeApi | None = None
) -> Iterator[RunningAgent]:
    """The agent as `vgpu-bridge node` wires it (`app.build`), its sockets started."""
    agent = build(agent_settings(dirs, node=node), api or unreachable_api(), gpus=gpus)
    agent.start()
    try:
        yield RunningAgent(dirs, agent.state, agent.server)
    finally:
        agent.close(grace_s=1)
