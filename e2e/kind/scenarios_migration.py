"""Moving from legacy HAMi to vgpu-bridge node pool by node pool, as docs/migration.md says
(``make e2e-kind`` collects this file after ``scenarios.py``; run only against kind's kubeconfig).

The layout: kind's CPU-only worker plays the last legacy GPU node. ``LegacyDevicePlugin`` stands
in for HAMi's device plugin there: it labels the node as the GPU operator labels a GPU node
(``nvidia.com/gpu.present=true``), as HAMi's chart picks its device plugin's nodes (``gpu=on``) and
as the recipe marks the legacy pool (``vgpu-bridge.io/pool=legacy``), writes the annotation HAMi's
device plugin registers a node with, and advertises ``nvidia.com/gpu`` (two cards times HAMi's
default split count of 10) and ``nvidia.com/gpumem`` (their MiB) in the node's status through the
API, as the kubelet publishes a device plugin's resources. No HAMi scheduler runs: kube-scheduler
books both resources itself (on a real HAMi node its scheduler extender books the memory). The
two GPU workers are the DRA pool (``vgpu-bridge.io/pool=dra``); the chart is installed with
``examples/migration/values.yaml``. ``examples/migration/deployment.yaml`` is applied as the same
text to a legacy namespace and to another one; then the legacy namespace and the legacy node move
over. Everything is put back at the end (labels, node status, namespaces, the chart's values).
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e.dra_objects import quantity
from e2e.kind.cluster import GPU_NODE_LABEL, NAMESPACE, VALUES, Kind, install
from e2e.kind.scenarios import (  # the fixtures and helpers of the kind scenarios
    EXAMPLES,
    RESOURCE,
    agent_pods,
    api,
    core,
    delete_pods,
    kind,
    log_with,
    workers,
)
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi, KubeError
from vgpu_bridge.webhook.legacy import HAMI_NODE_ANNOTATION, RECIPE

pytestmark = pytest.mark.e2e
__all__ = ["api", "core", "kind", "workers"]  # fixtures, used by name
Json = dict[str, Any]
MIGRATION = EXAMPLES / "migration"
MIGRATION_VALUES = MIGRATION / "values.yaml"
WORKLOAD = MIGRATION / "deployment.yaml"
WORKLOAD_NAME = "inference"
PROBE = EXAMPLES / "plain" / "pod-share.yaml"  # a pod the dry runs send through admission
POOL_LABEL = "vgpu-bridge.io/pool"
HAMI_WEBHOOK_LABEL = "hami.io/webhook"  # HAMi's webhook skips namespaces labelled `ignore`
GPU_LABEL, GPU_LABEL_VALUE = GPU_NODE_LABEL.split("=")
HAMI_DEVICE_PLUGIN_LABEL = "gpu"  # HAMi's devicePlugin.nvidiaNodeSelector default: gpu: "on"
CARDS, SPLIT_COUNT, CARD_MIB = 2, 10, 81920
ADVERTISED = {
    "nvidia.com/gpu": str(CARDS * SPLIT_COUNT),
    "nvidia.com/gpumem": str(CARDS * CARD_MIB),
}
MOCK_CARDS = len(yaml.safe_load(VALUES.read_text())["agent"]["mockGpus"])  # each agent's
HAMI_LIMITS = {"nvidia.com/gpu": Decimal(1), "nvidia.com/gpumem": Decimal(3000)}  # the example's
SWEEP_S = 5  # the webhook looks for legacy HAMi this often (the chart's default is 120 s)


@dataclass(frozen=True)
class LegacyDevicePlugin:
    """What HAMi's device plugin makes of a node, written through the API."""

    api: KubeApi
    node: str

    @property
    def path(self) -> str:
        return f"/api/v1/nodes/{self.node}"

    def install(self) -> None:
        devices = [
            {"id": f"GPU-legacy-{i}", "index": i, "count": SPLIT_COUNT, "devmem": CARD_MIB,
             "devcore": 100, "type": "NVIDIA-NVIDIA H100 80GB HBM3", "health": True}
            for i in range(CARDS)
        ]  # fmt: skip
        labels = {GPU_LABEL: GPU_LABEL_VALUE, HAMI_DEVICE_PLUGIN_LABEL: "on", POOL_LABEL: "legacy"}
        annotations = {HAMI_NODE_ANNOTATION: json.dumps(devices)}
        self.api.merge_patch(self.path, {"metadata": {"labels": labels,
                                                      "annotations": annotations}})  # fmt: skip
        self._advertise(ADVERTISED)

    def uninstall(self) -> None:
        """The plugin gone: its resources, its annotation and HAMi's node label go (the node keeps
        its GPU label and its pool label: the recipe relabels the pool)."""
        self._advertise(dict.fromkeys(ADVERTISED))
        meta = {"labels": {HAMI_DEVICE_PLUGIN_LABEL: None},
                "annotations": {HAMI_NODE_ANNOTATION: None}}  # fmt: skip
        self.api.merge_patch(self.path, {"metadata": meta})

    def _advertise(self, resources: Mapping[str, str | None]) -> None:
        """A merge patch of the node's status (None removes a resource)."""
        status = {"capacity": resources, "allocatable": resources}
        self.api.merge_patch(f"{self.path}/status", {"status": status})


@dataclass(frozen=True)
class Pools:
    legacy: str
    dra: list[str]
    plugin: LegacyDevicePlugin


@dataclass(frozen=True)
class Namespaces:
    legacy: str
    dra: str


def label_nodes(api: KubeApi, nodes: list[str], labels: dict[str, str | None]) -> None:
    for node in nodes:
        api.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}})


def cpu_worker(api: KubeApi, gpu_workers: list[str]) -> str:
    (found,) = [
        str(n["metadata"]["name"])
        for n in api.list("/api/v1/nodes")["items"]
        if "node-role.kubernetes.io/control-plane" not in n["metadata"].get("labels", {})
        and n["metadata"]["name"] not in gpu_workers
    ]
    return found


def agents_on(api: KubeApi) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in agent_pods(api) if p["spec"].get("nodeName"))


def our_slices(api: KubeApi, node: str) -> list[Json]:
    selector = f"spec.nodeName={node},spec.driver={DEFAULT.driver}"
    items: list[Json] = api.list(f"{RESOURCE}/resourceslices", fieldSelector=selector)["items"]
    return items


def published_cards(api: KubeApi, node: str) -> int:
    return sum(len(s["spec"].get("devices") or []) for s in our_slices(api, node))


@pytest.fixture(scope="module", autouse=True)
def pools(kind: Kind, api: KubeApi, workers: list[str]) -> Iterator[Pools]:
    """The two pools: the GPU workers labelled for our agent, the CPU worker made a legacy HAMi
    node, the chart installed with the migration values; all of it undone afterwards."""
    plugin = LegacyDevicePlugin(api, cpu_worker(api, workers))
    try:
        label_nodes(api, workers, {POOL_LABEL: "dra"})
        plugin.install()
        install(kind, "--values", str(MIGRATION_VALUES),
                "--set", f"webhook.settings.sweepIntervalSeconds={SWEEP_S}")  # fmt: skip
        yield Pools(plugin.node, workers, plugin)
    finally:
        put_back(kind, api, plugin, workers)


def put_back(kind: Kind, api: KubeApi, plugin: LegacyDevicePlugin, workers: list[str]) -> None:
    """The cluster as the other scenarios expect it: no agent, slice or label on the CPU worker,
    nothing advertised there, the chart's kind values, no pool labels."""
    plugin.uninstall()
    label_nodes(api, [plugin.node], {GPU_LABEL: None, POOL_LABEL: None})
    wait_for(
        lambda: plugin.node not in agents_on(api),
        timeout_s=180,
        what=f"no agent on {plugin.node}",
        interval_s=1,
    )
    for found in our_slices(api, plugin.node):  # left by the agent, unless the kubelet was first
        try:
            api.delete(f"{RESOURCE}/resourceslices/{found['metadata']['name']}")
        except KubeError as error:
            if error.status != 404:
                raise
    wait_for(lambda: not our_slices(api, plugin.node), timeout_s=60, what="no slice left")
    install(kind)
    label_nodes(api, workers, {POOL_LABEL: None})


@pytest.fixture(scope="module")
def namespaces(api: KubeApi, pools: Pools) -> Iterator[Namespaces]:
    suffix = secrets.token_hex(3)
    made = Namespaces(legacy=f"legacy-{suffix}", dra=f"dra-{suffix}")
    for name, labels in ((made.legacy, {POOL_LABEL: "legacy"}), (made.dra, {})):
        body = {"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "labels": labels}}  # fmt: skip
        api.create("/api/v1/namespaces", body)
    yield made
    for name in (made.legacy, made.dra):
        delete_pods(api, name)
        api.delete(f"/api/v1/namespaces/{name}")


def kubectl(kind: Kind, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*kind.kubectl, *args], input=stdin, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done


def apply_workload(kind: Kind, namespace: str) -> str:
    """``kubectl apply`` of the example's text, unchanged, into ``namespace``; its output."""
    return kubectl(kind, "apply", "-n", namespace, "-f", "-", stdin=WORKLOAD.read_text()).stdout


@dataclass(frozen=True)
class DryRun:
    pod: Json
    warnings: list[str]

    @property
    def translated(self) -> bool:
        return bool(self.pod["spec"].get("resourceClaims"))


def dry_run(kind: Kind, namespace: str) -> DryRun:
    """A server-side dry run of the probe pod: what admission makes of it, and its warnings."""
    done = kubectl(kind, "create", "--dry-run=server", "-n", namespace, "-o", "json",
                   "-f", str(PROBE))  # fmt: skip
    lines = done.stderr.splitlines()
    return DryRun(json.loads(done.stdout), [ln.removeprefix("Warning: ") for ln in lines
                                            if ln.startswith("Warning: ")])  # fmt: skip


def legacy_warnings(kind: Kind, namespace: str) -> list[str]:
    """The legacy-HAMi warnings a translated pod's admission in ``namespace`` carries."""
    return [w for w in dry_run(kind, namespace).warnings if w.startswith("legacy ")]


def workload_pod(api: KubeApi, namespace: str) -> Json:
    """The workload's one pod once it runs and no other (an old replica) is left."""

    def only_one_running() -> Json | None:
        items = api.list(f"/api/v1/namespaces/{namespace}/pods",
                         labelSelector=f"app={WORKLOAD_NAME}")["items"]  # fmt: skip
        running = [p for p in items if p.get("status", {}).get("phase") == "Running"]
        return running[0] if len(items) == len(running) == 1 else None

    return wait_for(only_one_running, timeout_s=240, what=f"one pod in {namespace}", interval_s=1)


def limits(pod: Json) -> dict[str, str]:
    found: dict[str, str] = pod["spec"]["containers"][0]["resources"].get("limits") or {}
    return found


def quantities(resources: Mapping[str, str]) -> dict[str, Decimal]:
    """The API server writes quantities canonically (`gpumem: 3000` comes back `3k`)."""
    return {name: quantity(value) for name, value in resources.items()}


def assert_translated_on(pod: Json, nodes: list[str]) -> None:
    assert pod["spec"]["nodeName"] in nodes, (pod["spec"]["nodeName"], nodes)
    assert pod["spec"].get("resourceClaims"), "the pod was not translated"
    assert not any(key.startswith("nvidia.com/") for key in limits(pod)), limits(pod)


def test_our_agent_runs_on_the_dra_pool_only_though_the_legacy_node_is_labelled_a_gpu_node(
    api: KubeApi, pools: Pools
) -> None:
    labels = api.get(f"/api/v1/nodes/{pools.legacy}")["metadata"]["labels"]
    assert labels[GPU_LABEL] == GPU_LABEL_VALUE
    assert labels[POOL_LABEL] == "legacy"
    wait_for(lambda: agents_on(api) == pools.dra, timeout_s=180, what="agents on the DRA pool")
    daemonsets = api.list(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets")["items"]
    (status,) = [d["status"] for d in daemonsets if d["metadata"]["name"].endswith("-agent")]
    assert status["desiredNumberScheduled"] == len(pools.dra)  # the legacy node is no candidate


def test_a_legacy_namespace_pod_is_left_alone_and_runs_on_the_legacy_node(
    kind: Kind, api: KubeApi, pools: Pools, namespaces: Namespaces
) -> None:
    apply_workload(kind, namespaces.legacy)
    pod = workload_pod(api, namespaces.legacy)
    assert pod["spec"]["nodeName"] == pools.legacy
    assert not pod["spec"].get("resourceClaims")
    assert quantities(limits(pod)) == HAMI_LIMITS
    probe = dry_run(kind, namespaces.legacy)  # never sent to our webhook
    assert not probe.translated
    assert probe.warnings == []


def test_the_same_manifest_in_a_dra_namespace_is_translated_and_runs_on_our_node(
    kind: Kind, api: KubeApi, core: client.CoreV1Api, pools: Pools, namespaces: Namespaces
) -> None:
    apply_workload(kind, namespaces.dra)
    pod = workload_pod(api, namespaces.dra)
    assert_translated_on(pod, pools.dra)
    log = log_with(core, namespaces.dra, pod["metadata"]["name"], "CUDA_DEVICE_MEMORY_LIMIT_0")
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=3000m" in log

    def warned() -> list[str] | None:
        return legacy_warnings(kind, namespaces.dra) or None

    (warning,) = wait_for(warned, timeout_s=60, what="the legacy-HAMi warning", interval_s=2)
    assert f"legacy HAMi's device plugin manages GPUs on nodes {pools.legacy}:" in warning
    assert RECIPE in warning


def test_moving_the_last_pool_over_needs_no_change_to_the_manifest(
    kind: Kind, api: KubeApi, pools: Pools, namespaces: Namespaces
) -> None:
    moved = namespaces.legacy
    labels = {POOL_LABEL: None, HAMI_WEBHOOK_LABEL: "ignore"}
    api.merge_patch(f"/api/v1/namespaces/{moved}", {"metadata": {"labels": labels}})
    wait_for(lambda: dry_run(kind, moved).translated, timeout_s=60, what=f"{moved} translated")
    kubectl(kind, "rollout", "restart", f"deployment/{WORKLOAD_NAME}", "-n", moved)
    kubectl(kind, "rollout", "status", f"deployment/{WORKLOAD_NAME}", "-n", moved, "--timeout=240s")
    assert_translated_on(workload_pod(api, moved), pools.dra)
    deployment = api.get(f"/apis/apps/v1/namespaces/{moved}/deployments/{WORKLOAD_NAME}")
    template = deployment["spec"]["template"]["spec"]["containers"][0]
    assert quantities(template["resources"]["limits"]) == HAMI_LIMITS
    # Git and the cluster still agree: applied again, nothing rolls out, and kubectl diff (a
    # server-side dry run through admission) finds nothing. kubectl itself may print
    # "configured": it sends gpumem as written (3000), which the API server keeps as 3k.
    apply_workload(kind, moved)
    path = f"/apis/apps/v1/namespaces/{moved}/deployments/{WORKLOAD_NAME}"
    assert api.get(path)["metadata"]["generation"] == deployment["metadata"]["generation"]
    diff = subprocess.run(
        [*kind.kubectl, "diff", "-n", moved, "-f", "-"], input=WORKLOAD.read_text(),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert diff.returncode == 0, f"kubectl diff: {diff.stdout}{diff.stderr}"

    pools.plugin.uninstall()  # the last legacy node: HAMi's device plugin goes, our agent comes
    label_nodes(api, [pools.legacy], {POOL_LABEL: "dra"})
    every = sorted([*pools.dra, pools.legacy])
    wait_for(lambda: agents_on(api) == every, timeout_s=180, what=f"an agent on {pools.legacy}")
    wait_for(
        lambda: published_cards(api, pools.legacy) == MOCK_CARDS,
        timeout_s=180,
        what=f"{pools.legacy}'s cards published",
        interval_s=1,
    )
    allocatable = api.get(f"/api/v1/nodes/{pools.legacy}")["status"]["allocatable"]
    assert not set(ADVERTISED) & set(allocatable), allocatable
    wait_for(
        lambda: not legacy_warnings(kind, namespaces.dra),
        timeout_s=60,
        what="no legacy-HAMi warning once HAMi is gone",
        interval_s=2,
    )
