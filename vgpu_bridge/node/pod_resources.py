"""Which containers of this node's pods use which ResourceClaims, from the kubelet's pod-resources
socket (`v1.PodResourcesLister/List`, node-local): the kubelet answers for its own pods only, so
the agent needs no right to read pods anywhere in the cluster (issue 35, item 7).

Only the fields read here are declared (their numbers are the kubelet's wire format, v1):
`ListPodResourcesResponse.pod_resources` (1); `PodResources` name (1), namespace (2), containers
(3); `ContainerResources` name (1), dynamic_resources (5); `DynamicResource` claim_name (2),
claim_namespace (3), claim_resources (4); `ClaimResource` pool_name (3), device_name (4). The
protobuf runtime skips the rest (device-plugin devices, CPUs, memory, CDI names). Checked
against k8s.io/kubelet v0.36.3's `pkg/apis/podresources/v1/api.proto`; the kubelet fills
`dynamic_resources` by default since 1.34 (feature KubeletPodResourcesDynamicResources, GA and
locked on in 1.36), and lists there the claim made for a container's extended resources too.

An answer is bounded (MAX_ANSWER_BYTES; a node runs at most a few hundred pods) and waited for
at most CALL_TIMEOUT_S; the socket is the kubelet's, root's alone on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
LIST_METHOD = "/v1.PodResourcesLister/List"
MAX_ANSWER_BYTES = 16 * 2**20
CALL_TIMEOUT_S = 5.0

_STRING = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
_MESSAGE = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
_REPEATED = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
_OPTIONAL = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL

# message -> (field name, number, message type or None for a string, repeated)
_FIELDS: dict[str, list[tuple[str, int, str | None, bool]]] = {
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, "PodResources", True)],
    "PodResources": [
        ("name", 1, None, False),
        ("namespace", 2, None, False),
        ("containers", 3, "ContainerResources", True),
    ],
    "ContainerResources": [
        ("name", 1, None, False),
        ("dynamic_resources", 5, "DynamicResource", True),
    ],
    "DynamicResource": [
        ("claim_name", 2, None, False),
        ("claim_namespace", 3, None, False),
        ("claim_resources", 4, "ClaimResource", True),
    ],
    "ClaimResource": [("pool_name", 3, None, False), ("device_name", 4, None, False)],
}


def _message_classes() -> dict[str, Any]:
    """The declared messages as protobuf classes, in a pool of their own (package `v1`)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="vgpu_bridge/node/pod_resources_v1.proto", package="v1", syntax="proto3"
    )
    for message, fields in _FIELDS.items():
        declared = proto.message_type.add(name=message)
        for name, number, kind, repeated in fields:
            field = declared.field.add(name=name, number=number)
            field.label = _REPEATED if repeated else _OPTIONAL
            field.type = _STRING if kind is None else _MESSAGE
            if kind is not None:
                field.type_name = f".v1.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    found = pool.FindFileByName(proto.name)
    return {name: message_factory.GetMessageClass(found.message_types_by_name[name])
            for name in _FIELDS}  # fmt: skip


MESSAGES = _message_classes()  # by name; fakes of the kubelet build answers with them


@dataclass(frozen=True, slots=True)
class ContainerUse:
    """A container that uses a claim: its pod, its name, the claim's place among the dynamic
    resources the kubelet lists for it (the container's claims in the order of the pod's
    `spec.resourceClaims`), and the claim's devices ((pool, device): the kubelet lists all of
    the claim's, whatever request the container names; empty when it names none: all)."""

    namespace: str
    pod: str
    container: str
    position: int
    devices: frozenset[tuple[str, str]] = frozenset()


ClaimKey = tuple[str, str]  # (namespace, claim name)


class PodResourcesUnavailable(RuntimeError):
    """The kubelet's pod-resources socket did not answer (absent, refused, timed out, too big)."""


class PodResources:
    """A client of the kubelet's pod-resources socket (`list_claim_users` asks it once)."""

    def __init__(self, socket: Path = DEFAULT_SOCKET) -> None:
        self.socket = socket

    def available(self) -> bool:
        return self.socket.is_socket()

    def list_claim_users(self) -> dict[ClaimKey, list[ContainerUse]]:
        """Every container of the node's pods that lists a claim, by the claim; raises
        `PodResourcesUnavailable` when the kubelet does not answer."""
        options = [("grpc.max_receive_message_length", MAX_ANSWER_BYTES)]
        try:
            with grpc.insecure_channel(f"unix:{self.socket}", options=options) as channel:
                call: grpc.UnaryUnaryMultiCallable[Any, Any] = channel.unary_unary(
                    LIST_METHOD,
                    request_serializer=lambda message: message.SerializeToString(),
                    response_deserializer=MESSAGES["ListPodResourcesResponse"].FromString,
                )
                answer = call(MESSAGES["ListPodResourcesRequest"](), timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as error:
            raise PodResourcesUnavailable(f"{self.socket}: {error}") from None
        return claim_users(answer)


def claim_users(answer: Any) -> dict[ClaimKey, list[ContainerUse]]:
    """`ListPodResourcesResponse` -> the containers using each claim (namespace, name)."""
    users: dict[ClaimKey, list[ContainerUse]] = {}
    for pod in answer.pod_resources:
        for container in pod.containers:
            for position, resource in enumerate(container.dynamic_resources):
                key = (resource.claim_namespace or pod.namespace, resource.claim_name)
                devices = frozenset(
                    (r.pool_name, r.device_name) for r in resource.claim_resources if r.device_name
                )
                users.setdefault(key, []).append(
                    ContainerUse(pod.namespace, pod.name, container.name, position, devices)
                )
    return users
