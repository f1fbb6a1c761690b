"""Which containers of this node's pods use which ResourceClaims, from the kubelet's pod-resources
socket (`v1.PodResourcesLister/List`, node-local): the kubelet answers for its own pods only, so
the agent needs no right to read pods anywhere in the cluster (issue 35, item 7).

The messages come from the stubs that scripts/generate_protos.py makes of the kubelet's own
`podresources/v1/api.proto` (vendored under proto/, tag kubernetes-1.36.3). Only a container's
`dynamic_resources` are read; the kubelet fills them by default since 1.34 (feature
KubeletPodResourcesDynamicResources, GA and locked on in 1.36), and lists there the claim made
for a container's extended resources too.

An answer is bounded (MAX_ANSWER_BYTES; a node runs at most a few hundred pods) and waited for
at most CALL_TIMEOUT_S; the socket is the kubelet's, root's alone on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from vgpu_bridge.node.kubeletapi import podresources_v1_pb2 as api
from vgpu_bridge.node.kubeletapi import podresources_v1_pb2_grpc as api_grpc

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
MAX_ANSWER_BYTES = 16 * 2**20
CALL_TIMEOUT_S = 5.0


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
                lister = api_grpc.PodResourcesListerStub(channel)
                answer = lister.List(api.ListPodResourcesRequest(), timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as error:
            raise PodResourcesUnavailable(f"{self.socket}: {error}") from None
        return claim_users(answer)


def claim_users(answer: api.ListPodResourcesResponse) -> dict[ClaimKey, list[ContainerUse]]:
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
