"""The simulated cluster: fake nodes (Node objects, no kubelet) of 8 cards of 80 GiB, each node's
ResourceSlices as our node agent builds them (``node.slices.build_slices``, the agent's own
code), and ResourceClaims of our driver allocated on those cards (the allocation written through
the status subresource, as the scheduler writes it), spread over namespaces. It grows in steps:
each ``grow`` adds the nodes and claims the new size needs, so the measurements of a step see
every object of the steps before.

Claim ``j`` is allocated on card ``j // claims_per_gpu`` (card ``c`` is ``gpu-<c % 8>`` of node
``c // 8``), asking for its share of the card (memory and cores split ``claims_per_gpu`` ways, as
the translator writes the claim: ``core.claims.claim_spec``). The first ``small_claims`` claims
are in the small namespace; the rest go round the other namespaces.
"""

from __future__ import annotations

import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench.scaling.bulk import MERGE_PATCH, ApiConnection, in_threads
from e2e.cluster import KubeClient, create_fake_node
from e2e.cluster.client import Json
from e2e.cluster.nodes import kubelet_version
from e2e.dra_objects import device_class
from vgpu_bridge.core import DEFAULT, DeviceFilter, GpuRequest, Inventory
from vgpu_bridge.core.claims import claim_spec
from vgpu_bridge.core.models import Problems
from vgpu_bridge.core.quantity import MiB
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.slices import build_slices

RESOURCE = "/apis/resource.k8s.io/v1"
GPUS_PER_NODE = 8
CARD_MEMORY = 80 * 2**30
PRODUCT = "NVIDIA H100 80GB HBM3"
REMOVE_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Layout:
    """What the fleet's objects are called and how its claims are spread."""

    node_prefix: str = "scale-node-"
    namespace_prefix: str = "scale-ns-"
    claim_prefix: str = "scale-claim-"
    small_namespace: str = "viewer-small"
    namespaces: int = 100  # the small one included
    small_claims: int = 100
    claims_per_gpu: float = 2.0

    def node(self, index: int) -> str:
        return f"{self.node_prefix}{index:05d}"

    def claim(self, index: int) -> str:
        return f"{self.claim_prefix}{index:06d}"

    def namespace_names(self) -> list[str]:
        others = [f"{self.namespace_prefix}{i:02d}" for i in range(self.namespaces - 1)]
        return [self.small_namespace, *others]

    def namespace_of(self, claim: int) -> str:
        if claim < self.small_claims:
            return self.small_namespace
        return f"{self.namespace_prefix}{(claim - self.small_claims) % (self.namespaces - 1):02d}"

    def card_of(self, claim: int) -> tuple[str, str]:
        """(node, device) that claim number `claim` is allocated on."""
        card = int(claim // self.claims_per_gpu)
        return self.node(card // GPUS_PER_NODE), f"gpu-{card % GPUS_PER_NODE}"


def nodes_for(gpus: int) -> int:
    """Nodes of 8 cards that hold `gpus` (2,500 GPUs: 313 nodes)."""
    return math.ceil(gpus / GPUS_PER_NODE)


@dataclass
class Fleet:
    """The objects made so far on one cluster; `grow` adds, `remove` deletes them all."""

    kube: KubeClient
    layout: Layout = field(default_factory=Layout)
    threads: int = 8
    with_device_class: bool = True  # False on a shared cluster whose class another test owns
    nodes: int = 0
    claims: int = 0
    slices: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return self.nodes * GPUS_PER_NODE

    def grow(self, *, gpus: int, claims: int) -> float:
        """Add nodes (with their slices) up to `gpus` cards and claims up to `claims`; seconds
        it took (not a measurement: the client's pace as much as the server's)."""
        started = time.monotonic()
        if self.nodes == 0:
            self._create_class_and_namespaces()
        self._add_nodes(nodes_for(gpus))
        self._add_claims(claims)
        return time.monotonic() - started

    def _create_class_and_namespaces(self) -> None:
        if self.with_device_class:
            self.kube.create(f"{RESOURCE}/deviceclasses",
                             device_class(DEFAULT.device_class, driver=DEFAULT.driver))  # fmt: skip
        for name in self.layout.namespace_names():
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            self.kube.create("/api/v1/namespaces", body)

    def _add_nodes(self, count: int) -> None:
        names = [self.layout.node(i) for i in range(self.nodes, count)]
        bodies = [body for name in names for body in node_slices(name)]
        # counted before they are made: `remove` after a failed grow deletes what there is
        self.slices += [body["metadata"]["name"] for body in bodies]
        self.nodes = max(self.nodes, count)
        version = kubelet_version(self.kube)
        with ThreadPoolExecutor(self.threads) as pool:
            list(pool.map(lambda name: create_fake_node(self.kube, name, version=version), names))
        in_threads(self.kube, bodies, _post_slice, threads=self.threads)

    def _add_claims(self, count: int) -> None:
        spec = share_spec(self.layout.claims_per_gpu)
        numbers = range(self.claims, count)
        in_threads(self.kube, numbers, lambda c, j: self._create_claim(c, j, spec),
                   threads=self.threads)  # fmt: skip
        self.claims = max(self.claims, count)

    def _create_claim(self, connection: ApiConnection, number: int, spec: Json) -> None:
        namespace, name = self.layout.namespace_of(number), self.layout.claim(number)
        path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name}, "spec": spec}  # fmt: skip
        connection.send("POST", path, body)
        node, device = self.layout.card_of(number)
        status = {"status": {"allocation": allocation(node, device, spec)}}
        connection.send("PATCH", f"{path}/{name}/status", status, content_type=MERGE_PATCH)

    def remove(self) -> None:
        """Delete every object made (claims first, so no namespace waits on them), and wait
        until the namespaces are gone."""
        namespaces = self.layout.namespace_names()
        for namespace in namespaces:
            self.kube.request("DELETE", f"{RESOURCE}/namespaces/{namespace}/resourceclaims")
            self.kube.delete(f"/api/v1/namespaces/{namespace}")
        paths = [f"{RESOURCE}/resourceslices/{name}" for name in self.slices]
        paths += [f"/api/v1/nodes/{self.layout.node(i)}" for i in range(self.nodes)]
        with ThreadPoolExecutor(self.threads) as pool:
            list(pool.map(self.kube.delete, paths))
        if self.with_device_class:
            self.kube.delete(f"{RESOURCE}/deviceclasses/{DEFAULT.device_class}")
        deadline = time.monotonic() + REMOVE_TIMEOUT_S
        while any(self.kube.exists(f"/api/v1/namespaces/{n}") for n in namespaces):
            if time.monotonic() > deadline:
                raise RuntimeError(f"namespaces not gone in {REMOVE_TIMEOUT_S:.0f}s: {namespaces}")
            time.sleep(0.5)
        self.nodes, self.claims, self.slices = 0, 0, []


def node_slices(node: str) -> list[Json]:
    """What our agent publishes for a node of 8 mock 80 GiB cards."""
    gpus = [Gpu(i, f"GPU-{node}-{i}", PRODUCT, CARD_MEMORY) for i in range(GPUS_PER_NODE)]
    return build_slices(gpus, node=node, profile=DEFAULT, generation=1)


def _post_slice(connection: ApiConnection, body: Json) -> None:
    connection.send("POST", f"{RESOURCE}/resourceslices", body)


def share_spec(claims_per_gpu: float) -> Json:
    """The claim the translator writes for one `claims_per_gpu`-th of a card's memory and cores
    (at least 1 MiB and 1%)."""
    memory_mib = max(1, int(CARD_MEMORY / MiB / claims_per_gpu))
    cores = max(1, min(100, int(100 / claims_per_gpu)))
    problems = Problems()
    spec = claim_spec(GpuRequest(count=1, memory_mib=memory_mib, cores=cores), DeviceFilter(),
                      profile=DEFAULT, inventory=Inventory(), percent_path="-",
                      problems=problems)  # fmt: skip
    if spec is None:
        raise ValueError(f"no claim for {memory_mib} MiB and {cores}%: {problems.errors}")
    return spec


def allocation(node: str, device: str, spec: Json) -> Json:
    """The allocation the scheduler would write for `spec`'s one request on `device` of `node`:
    the capacities it asks for are what it consumes."""
    (request,) = spec["devices"]["requests"]
    consumed: dict[str, Any] = dict(request["exactly"]["capacity"]["requests"])
    result = {
        "request": request["name"],
        "driver": DEFAULT.driver,
        "pool": node,
        "device": device,
        "shareID": str(uuid.uuid4()),
        "consumedCapacity": consumed,
    }
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"devices": {"results": [result]}, "nodeSelector": {"nodeSelectorTerms": [selector]}}
