"""The kubelet's gRPC services on unix sockets: protobuf in, `DeviceState` calls, protobuf out.

`Registration` on `<registry-dir>/<driver>-reg.sock` tells the kubelet our driver name, the DRA
socket and the API versions (v1 first: the kubelet takes the first it supports). `DRAPlugin` v1
and v1beta1 on `<plugin-dir>/dra.sock` delegate to the state, which answers per claim. The DRA
socket is served before the registration socket appears, because the kubelet may call at once.
"""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.checkpoint import PreparedDevice
from vgpu_bridge.node.kubeletapi import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from vgpu_bridge.node.state import DEFAULT_BUDGET_S, ClaimRef, DeviceState

#: The DRAPlugin versions we serve, each with its generated message and service modules; v1
#: first: the kubelet takes the first version it supports.
DRA_VERSIONS: tuple[tuple[str, ModuleType, ModuleType], ...] = (
    ("v1.DRAPlugin", dra_v1_pb2, dra_v1_pb2_grpc),
    ("v1beta1.DRAPlugin", dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
)
SUPPORTED_VERSIONS = tuple(version for version, _, _ in DRA_VERSIONS)
PLUGIN_TYPE = "DRAPlugin"
log = get_logger("vgpu_bridge.node.grpc")


ANSWER_MARGIN_S = 2.0  # time kept to build and send the answer before the caller's deadline
CONNECT_TIMEOUT_S = 2.0  # per socket, for the health check (the probe allows 5 s in all)


def _refs(claims: Any) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


def _budget(context: grpc.ServicerContext) -> float:
    """Seconds the state may spend: the caller's deadline less a margin, at most the default."""
    remaining = context.time_remaining()
    if remaining is None:
        return DEFAULT_BUDGET_S
    return max(0.0, min(DEFAULT_BUDGET_S, remaining - ANSWER_MARGIN_S))


class DraServicer:
    """`DRAPlugin` of one API version. `messages` is that version's generated `_pb2` module: v1
    and v1beta1 define the same messages, except that only v1's `Device` has a `share_id`."""

    def __init__(self, state: DeviceState, messages: ModuleType) -> None:
        self._state = state
        self._messages = messages
        self._share_ids = "share_id" in messages.Device.DESCRIPTOR.fields_by_name

    def NodePrepareResources(  # noqa: N802 - the generated servicer's method name
        self, request: Any, context: grpc.ServicerContext
    ) -> Any:
        response = self._messages.NodePrepareResourcesResponse()
        for uid, prepared in self._state.prepare(
            _refs(request.claims), budget_s=_budget(context)
        ).items():
            entry = response.claims[uid]
            if prepared.error is not None:
                entry.error = prepared.error
            entry.devices.extend(self._device(d) for d in prepared.devices)
        return response

    def NodeUnprepareResources(  # noqa: N802 - the generated servicer's method name
        self, request: Any, context: grpc.ServicerContext
    ) -> Any:
        response = self._messages.NodeUnprepareResourcesResponse()
        for uid, error in self._state.unprepare(_refs(request.claims)).items():
            response.claims[uid].error = error or ""
        return response

    def _device(self, device: PreparedDevice) -> Any:
        converted = self._messages.Device(
            request_names=device.request_names,
            pool_name=device.pool_name,
            device_name=device.device_name,
            cdi_device_ids=device.cdi_device_ids,
        )
        if self._share_ids and device.share_id is not None:
            converted.share_id = device.share_id
        return converted


class Registration(pluginregistration_v1_pb2_grpc.RegistrationServicer):
    def __init__(self, *, driver: str, endpoint: Path) -> None:
        self._driver = driver
        self._endpoint = endpoint
        self.registered = threading.Event()
        self.last_error = ""

    def GetInfo(  # noqa: N802 - the generated servicer's method name
        self, request: pluginregistration_v1_pb2.InfoRequest, context: grpc.ServicerContext
    ) -> pluginregistration_v1_pb2.PluginInfo:
        return pluginregistration_v1_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=self._driver,
            endpoint=str(self._endpoint),
            supported_versions=SUPPORTED_VERSIONS,
        )

    def NotifyRegistrationStatus(  # noqa: N802 - the generated servicer's method name
        self,
        request: pluginregistration_v1_pb2.RegistrationStatus,
        context: grpc.ServicerContext,
    ) -> pluginregistration_v1_pb2.RegistrationStatusResponse:
        if request.plugin_registered:
            self.registered.set()
            log.info("registered with the kubelet", driver=self._driver)
        else:
            self.registered.clear()
            self.last_error = request.error
            log.error("the kubelet refused the registration", error=request.error)
        return pluginregistration_v1_pb2.RegistrationStatusResponse()


class PluginServer:
    """Both sockets: DRA first, then registration; stop removes registration first."""

    def __init__(
        self,
        state: DeviceState,
        *,
        driver: str,
        dra_socket: Path,
        registration_socket: Path,
        workers: int = 4,
    ) -> None:
        self.dra_socket = dra_socket
        self.registration_socket = registration_socket
        self.registration = Registration(driver=driver, endpoint=dra_socket)
        self._dra = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
        for _, messages, services in DRA_VERSIONS:
            services.add_DRAPluginServicer_to_server(DraServicer(state, messages), self._dra)
        self._registrar = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(
            self.registration, self._registrar
        )

    def start(self) -> None:
        _serve_on(self._dra, self.dra_socket)
        _serve_on(self._registrar, self.registration_socket)
        log.info("serving", dra_socket=str(self.dra_socket),
                 registration_socket=str(self.registration_socket))  # fmt: skip

    def problem(self, *, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
        """Why the servers do not serve on their sockets, or None when both do: each path must
        be a socket whose gRPC server answers a call within `timeout_s`. Catches a stopped server
        and a socket file removed under a running one. The call names a method no server has
        (`PROBE_METHOD`): a serving gRPC server answers UNIMPLEMENTED at once, with no side
        effect. (Waiting for a new channel's readiness instead costs grpcio's 0.2 s state poll
        per socket, which made every /healthz and /metrics take 0.4 s.)"""
        for what, socket in (("DRA", self.dra_socket), ("registration", self.registration_socket)):
            if not socket.is_socket():
                return f"the {what} socket {socket} is gone"
            if not _answers(socket, timeout_s):
                return (
                    f"no gRPC server answers on the {what} socket {socket} within {timeout_s:g} s"
                )
        return None

    def stop(self, grace_s: float = 5.0) -> None:
        self._registrar.stop(grace_s).wait()
        self.registration_socket.unlink(missing_ok=True)
        self._dra.stop(grace_s).wait()
        self.dra_socket.unlink(missing_ok=True)


#: A method no gRPC server of ours (or the kubelet's) serves: the health probe's call.
PROBE_METHOD = "/vgpu_bridge.health.v1.Probe/Ping"


def _answers(socket: Path, timeout_s: float) -> bool:
    """Whether a gRPC server on `socket` answers one call (any status but UNAVAILABLE or
    DEADLINE_EXCEEDED: UNIMPLEMENTED is the expected answer) within `timeout_s`."""
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        probe: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(PROBE_METHOD)
        try:
            probe(b"", timeout=timeout_s, wait_for_ready=True)
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            return code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    return True


def _serve_on(server: grpc.Server, socket: Path) -> None:
    socket.parent.mkdir(parents=True, exist_ok=True)
    socket.unlink(missing_ok=True)  # a socket left by a previous run
    if server.add_insecure_port(f"unix:{socket}") == 0:
        raise OSError(f"cannot listen on {socket}")
    server.start()
