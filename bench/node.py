"""NodePrepareResources latency of `vgpu-bridge node`, called as the kubelet calls it: gRPC over
its unix socket, the claims read from a real API server (the local control plane, started for
the run) and prepared into CDI specs and the checkpoint. Mock GPUs; claims allocated through the
API's status subresource. Target: p99 under 50 ms per claim. Prints a table; `make bench`."""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc

from e2e.cluster import KubeClient, Settings, create_fake_node, running_cluster
from e2e.cluster.client import Json
from e2e.node.agent import running_agent
from e2e.node.claims import allocated_claim, result
from vgpu_bridge.node.kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc

SINGLE_CALLS = 200
BATCH_CALLS, BATCH_SIZE = 10, 100
TARGET_P99_MS = 50.0


def mock_gpus(count: int) -> list[dict[str, str]]:
    """`count` mock 80Gi cards for the agent's `--mock-gpus`, named `gpu-0`... in its slices."""
    return [
        {"uuid": f"GPU-bench-{i:04}", "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"}
        for i in range(count)
    ]


GPUS = mock_gpus(8)


def _claims(kube: KubeClient, namespace: str, node: str, count: int, tag: str) -> list[Json]:
    return [
        allocated_claim(kube, namespace, f"{tag}-{i}", node=node,
                        results=[result(node, f"gpu-{i % len(GPUS)}", memory="1Gi", cores="5")])
        for i in range(count)
    ]  # fmt: skip


def prepare_request(claims: list[Json]) -> dra_v1_pb2.NodePrepareResourcesRequest:
    return dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[
            dra_v1_pb2.Claim(namespace=c["metadata"]["namespace"], name=c["metadata"]["name"],
                             uid=c["metadata"]["uid"])
            for c in claims
        ]
    )  # fmt: skip


def timed_prepare(stub: dra_v1_pb2_grpc.DRAPluginStub, claims: list[Json]) -> float:
    """Milliseconds of one NodePrepareResources call with `claims`; exits on any claim error."""
    request = prepare_request(claims)
    start = time.perf_counter()
    response = stub.NodePrepareResources(request, timeout=45)
    elapsed = (time.perf_counter() - start) * 1000
    errors = [a.error for a in response.claims.values() if a.error]
    if errors:
        raise SystemExit(f"prepare failed: {errors[:3]}")
    return elapsed


def _row(case: str, latencies: list[float], claims_per_call: int) -> str:
    p50 = statistics.median(latencies)
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
    per_claim = p99 / claims_per_call
    verdict = "ok" if per_claim < TARGET_P99_MS else "MISSED"
    return (f"{case:<44} {len(latencies):>5} {p50:>9.2f} {p99:>9.2f} {per_claim:>13.2f}"
            f"   {verdict}")  # fmt: skip


def main() -> int:
    with running_cluster(Settings.from_env()) as cluster:
        kube = cluster.client()
        node, namespace = f"bench-node-{secrets.token_hex(3)}", "bench-node"
        create_fake_node(kube, node)
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": namespace}})  # fmt: skip
        with running_agent(node, cluster.kubeconfig, GPUS) as agent:
            stub = dra_v1_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix:{agent.dra_socket}"))
            singles = _claims(kube, namespace, node, SINGLE_CALLS, "single")
            new = [timed_prepare(stub, [claim]) for claim in singles]
            again = [timed_prepare(stub, [claim]) for claim in singles]
            batches = [_claims(kube, namespace, node, BATCH_SIZE, f"batch{b}")
                       for b in range(BATCH_CALLS)]  # fmt: skip
            batched = [timed_prepare(stub, batch) for batch in batches]
    load = os.getloadavg()[0]
    print(f"NodePrepareResources over the agent's unix socket (real API server; target p99 "
          f"< {TARGET_P99_MS:.0f} ms per claim)")  # fmt: skip
    print(f"machine load during the run: {load:.1f} on {os.cpu_count()} CPUs")
    print(f"{'case':<44} {'calls':>5} {'p50 ms':>9} {'p99 ms':>9} {'p99/claim ms':>13}")
    print(_row("1 claim per call, new (API read + CDI + checkpoint)", new, 1))
    print(_row("1 claim per call, already prepared", again, 1))
    print(_row(f"{BATCH_SIZE} claims per call, new", batched, BATCH_SIZE))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
