"""A kubelet's pod-resources socket (`v1.PodResourcesLister/List`) served over a real unix
socket from a dict, for the tests of the agent's HAMi series."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc

from vgpu_bridge.node.kubeletapi import podresources_v1_pb2 as api
from vgpu_bridge.node.kubeletapi import podresources_v1_pb2_grpc as api_grpc

# (pod namespace, pod name) -> container -> [(claim namespace, claim name, [(pool, device)])]
Pods = Mapping[tuple[str, str], Mapping[str, list[tuple[str, str, list[tuple[str, str]]]]]]
HOLD_LIMIT_S = 30.0  # a held answer is released by then whatever the test does


def list_answer(pods: Pods) -> api.ListPodResourcesResponse:
    """A `ListPodResourcesResponse` as the kubelet sends it."""
    answer = api.ListPodResourcesResponse()
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


class FakeKubelet(api_grpc.PodResourcesListerServicer):
    """Answers `List` with `pods` (changeable between calls), and counts the calls; with `hold`,
    answers only once that event is set (a kubelet that hangs)."""

    def __init__(self, pods: Pods, hold: threading.Event | None = None) -> None:
        self.pods = pods
        self.calls = 0
        self._hold = hold

    def List(  # noqa: N802 - the generated servicer's method name
        self, request: api.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api.ListPodResourcesResponse:
        self.calls += 1
        if self._hold is not None:
            self._hold.wait(HOLD_LIMIT_S)
        return list_answer(self.pods)

    def GetAllocatableResources(  # noqa: N802
        self, request: api.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api.AllocatableResourcesResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the agent asks only List")

    def Get(  # noqa: N802
        self, request: api.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> api.GetPodResourcesResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the agent asks only List")


@contextmanager
def serving(kubelet: FakeKubelet, socket: Path) -> Iterator[Path]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    try:
        yield socket
    finally:
        server.stop(grace=None)
