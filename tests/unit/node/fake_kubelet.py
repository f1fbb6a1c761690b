"""A kubelet's pod-resources socket (`v1.PodResourcesLister/List`) served over a real unix
socket from a dict, for the tests of the agent's HAMi series."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from vgpu_bridge.node.pod_resources import MESSAGES

# (pod namespace, pod name) -> container -> [(claim namespace, claim name, [(pool, device)])]
Pods = Mapping[tuple[str, str], Mapping[str, list[tuple[str, str, list[tuple[str, str]]]]]]


def list_answer(pods: Pods) -> Any:
    """A `ListPodResourcesResponse` as the kubelet sends it."""
    answer = MESSAGES["ListPodResourcesResponse"]()
    for (namespace, name), containers in pods.items():
        pod = answer.pod_resources.add(name=name, namespace=namespace)
        for container_name, resources in containers.items():
            container = pod.containers.add(name=container_name)
            for claim_namespace, claim_name, devices in resources:
                resource = container.dynamic_resources.add(
                    claim_name=claim_name, claim_namespace=claim_namespace
                )
                for pool, device in devices:
                    resource.claim_resources.add(pool_name=pool, device_name=device)
    return answer


class FakeKubelet:
    """Answers `List` with `pods` (changeable between calls), and counts the calls."""

    def __init__(self, pods: Pods) -> None:
        self.pods = pods
        self.calls = 0

    def list(self, _request: object, _context: object) -> Any:
        self.calls += 1
        return list_answer(self.pods)


@contextmanager
def serving(kubelet: FakeKubelet, socket: Path) -> Iterator[Path]:
    method: grpc.RpcMethodHandler[Any, Any] = grpc.unary_unary_rpc_method_handler(
        kubelet.list,
        request_deserializer=MESSAGES["ListPodResourcesRequest"].FromString,
        response_serializer=lambda message: message.SerializeToString(),
    )
    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {"List": method})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    try:
        yield socket
    finally:
        server.stop(grace=None)
