"""The demo: our webhook and node agents (mock GPUs) on the local control plane, examples/ applied,
and what each workload got.

What is real: kube-apiserver, kube-scheduler and kube-controller-manager at Kubernetes >= 1.36,
our webhook (`vgpu-bridge webhook`) and node agents (`vgpu-bridge node`, one per fake node,
publishing ResourceSlices of mock GPUs), Volcano's vc-scheduler and vc-controller-manager when
that tier is present. What is not: no kubelet and no container runtime run here; the e2e
kubelet stand-in calls each agent's DRA gRPC socket as the kubelet would, and marks the pod
Running. So the limits shown are those of the CDI spec the agent wrote, which a runtime would
inject into the container.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from e2e.chart.cluster_api import Discovery, server_side_apply
from e2e.chart.helmbin import ensure_helm
from e2e.chart.rendering import Helm, of_kind
from e2e.cluster import KubeClient, KubeletStandIn, Settings, create_fake_node
from e2e.cluster.client import ApiError
from e2e.demo.table import Row, rows_for_pod
from e2e.node.agent import AgentProcess, GrpcPreparer, running_agent
from e2e.volcano.build import VolcanoBuild
from e2e.volcano.build import ensure_binary as ensure_volcano
from e2e.volcano.components import install_crds, running_volcano
from e2e.waiting import wait_for
from e2e.webhook.process import NAMESPACE_LABEL, WebhookProcess, running_webhook
from vgpu_bridge.core import DEFAULT

Json = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
NAMESPACE = "vgpu-demo"
RESOURCE = "/apis/resource.k8s.io/v1"
#: Two fake nodes, each with its own node agent and mock GPUs of two sizes.
NODES: dict[str, list[dict[str, str]]] = {
    "demo-gpu-0": [
        {"uuid": "GPU-demo-0000", "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"},
        {"uuid": "GPU-demo-0001", "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"},
    ],
    "demo-gpu-1": [
        {"uuid": "GPU-demo-1000", "productName": "NVIDIA A100-PCIE-40GB", "memory": "40Gi"},
        {"uuid": "GPU-demo-1001", "productName": "NVIDIA A100-PCIE-40GB", "memory": "40Gi"},
    ],
}
KAI_NOTE = "admitted, translated; not scheduled: no KAI scheduler runs here"


@dataclass
class DemoStack:
    kube: KubeClient
    kubeconfig: Path
    workdir: Path
    discovery: Discovery
    agents: dict[str, AgentProcess]
    webhook: WebhookProcess
    log: Callable[[str], None]
    applied: list[Json] = field(default_factory=list)

    def spec_of(self, node: str, claim_uid: str) -> Json | None:
        agent = self.agents.get(node)
        if agent is None:
            return None
        try:
            spec: Json = json.loads(agent.layout.spec_path(claim_uid).read_text())
        except (OSError, ValueError):
            return None
        return spec


def load_examples(folder: str) -> list[Json]:
    """The manifests of ``examples/<folder>``, as the docs show them."""
    objects = []
    for path in sorted((EXAMPLES / folder).glob("*.yaml")):
        objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return objects


def apply(stack: DemoStack, obj: Json) -> Json:
    """Create one example in the demo namespace (through our webhook)."""
    body = {**obj, "metadata": {**obj["metadata"], "namespace": NAMESPACE}}
    collection = stack.discovery.path(body).rsplit("/", 1)[0]
    created = stack.kube.create(collection, body)
    stack.applied.append(created)
    return created


@contextlib.contextmanager
def demo_stack(
    kube: KubeClient, kubeconfig: Path, settings: Settings, log: Callable[[str], None]
) -> Iterator[DemoStack]:
    """Nodes with agents, the chart's DeviceClass, the webhook, a labelled namespace; all of it
    removed again on exit."""
    discovery = Discovery(kube)
    _remove_leftovers(kube)
    device_classes = _chart_device_classes(settings)
    workdir = Path(tempfile.mkdtemp(prefix="vgpu-demo-"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, True)
        stack.callback(_remove_nodes, kube)
        for device_class in device_classes:
            path = discovery.path(device_class)
            server_side_apply(kube, path, device_class, dry_run=False)
            stack.callback(kube.delete, path)
        names = ", ".join(c["metadata"]["name"] for c in device_classes)
        log(f"DeviceClass {names} (from the chart)")
        agents = {}
        # the e2e agent helper prints each agent's log on exit, for failed tests: not here
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        for node, gpus in NODES.items():
            create_fake_node(kube, node)
            agent = stack.enter_context(running_agent(node, kubeconfig, gpus))
            preparer = GrpcPreparer(agent.dra_socket)
            stack.callback(preparer.close)
            stack.enter_context(KubeletStandIn(kube, [node], preparer=preparer))
            agents[node] = agent
            cards = ", ".join(f"{g['productName']} {g['memory']}" for g in gpus)
            log(f"node {node}: vgpu-bridge node (mock GPUs: {cards}), kubelet stand-in")
        wait_for(lambda: _slices_published(kube), timeout_s=60, what="the agents' ResourceSlices")
        webhook = stack.enter_context(running_webhook(kube, kubeconfig, workdir, grace_s=600))
        log(f"vgpu-bridge webhook on 127.0.0.1:{webhook.port}, registered (failurePolicy Fail)")
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {NAMESPACE_LABEL: "true"}},
        }
        kube.create("/api/v1/namespaces", namespace)
        stack.callback(_delete_namespace, kube)
        yield DemoStack(kube, kubeconfig, workdir, discovery, agents, webhook, log)


def _chart_device_classes(settings: Settings) -> list[Json]:
    helm = Helm(ensure_helm(settings).binary)
    return of_kind(helm.template(), "DeviceClass")


def _slices_published(kube: KubeClient) -> bool:
    slices = kube.items(f"{RESOURCE}/resourceslices", fieldSelector=f"spec.driver={DEFAULT.driver}")
    nodes = {s["spec"].get("nodeName") for s in slices if s["spec"].get("devices")}
    return set(NODES) <= nodes


def _delete_namespace(kube: KubeClient) -> None:
    """The namespace controller deletes the workloads, then the pods gracefully, so the
    stand-ins unprepare them through the agents (the CDI specs go) before the agents stop."""
    kube.delete(f"/api/v1/namespaces/{NAMESPACE}")
    with contextlib.suppress(AssertionError):
        wait_for(
            lambda: not kube.exists(f"/api/v1/namespaces/{NAMESPACE}"),
            timeout_s=90,
            what="the demo namespace gone",
        )


def _remove_nodes(kube: KubeClient) -> None:
    for node in NODES:
        kube.delete(f"/api/v1/nodes/{node}")
        selector = f"spec.nodeName={node},spec.driver={DEFAULT.driver}"
        for item in kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector):
            kube.delete(f"{RESOURCE}/resourceslices/{item['metadata']['name']}")


def _remove_leftovers(kube: KubeClient) -> None:
    """What a kept (``--keep``) earlier run left: its namespace and nodes."""
    try:
        kube.get(f"/api/v1/namespaces/{NAMESPACE}")
    except ApiError as error:
        if error.status != 404:
            raise
    else:
        for pod in kube.items(f"/api/v1/namespaces/{NAMESPACE}/pods"):
            name = pod["metadata"]["name"]
            kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", grace_period_s=0)
        kube.delete(f"/api/v1/namespaces/{NAMESPACE}")
        wait_for(
            lambda: not kube.exists(f"/api/v1/namespaces/{NAMESPACE}"),
            timeout_s=60,
            what="the previous demo namespace gone",
        )
    _remove_nodes(kube)


def wait_running(stack: DemoStack, *, expected: int, timeout_s: float) -> bool:
    """Wait until ``expected`` pods of scheduled workloads run; False on timeout."""

    def running() -> bool:
        pods = stack.kube.items(f"/api/v1/namespaces/{NAMESPACE}/pods")
        done = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        return len(done) >= expected

    try:
        wait_for(running, timeout_s=timeout_s, what="demo pods Running")
    except AssertionError:
        return False
    return True


def collect_rows(stack: DemoStack, notes: dict[str, str]) -> list[Row]:
    """One row per share, pods sorted by workload; ``notes`` by scheduler name."""
    pods = stack.kube.items(f"/api/v1/namespaces/{NAMESPACE}/pods")
    claims = {
        c["metadata"]["name"]: c
        for c in stack.kube.items(f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims")
    }
    rows = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        note = notes.get(pod["spec"].get("schedulerName", ""), "")
        rows += rows_for_pod(pod, claims, stack.spec_of, note=note)
    return sorted(rows, key=lambda r: (r.workload, r.node, r.device))


def run_examples(stack: DemoStack, settings: Settings, out: TextIO) -> list[Row]:
    """examples/plain (kube-scheduler), examples/kai (admitted; no KAI scheduler here) and
    examples/volcano (vc-scheduler, when the Volcano tier can run); one row per share."""
    notes = {"kai-scheduler": KAI_NOTE}
    running = _apply_folder(stack, "plain")
    if not wait_running(stack, expected=running, timeout_s=120):
        print("demo: not every plain pod reached Running in 120 s (see the table)", file=out)
    _apply_folder(stack, "kai", note=KAI_NOTE)
    with contextlib.ExitStack() as volcano:
        try:
            volcano.enter_context(_volcano(stack, settings))
        except Exception as error:  # the demo says why and goes on without Volcano
            notes["volcano"] = f"Volcano unavailable: {error}".splitlines()[0][:100]
            stack.log(notes["volcano"])
        else:
            running += _apply_folder(stack, "volcano")
            if not wait_running(stack, expected=running, timeout_s=120):
                print("demo: the Volcano gang did not reach Running in 120 s", file=out)
        return collect_rows(stack, notes)


def _apply_folder(stack: DemoStack, folder: str, *, note: str = "") -> int:
    """Apply ``examples/<folder>``; the number of pods its objects make."""
    pods = 0
    for obj in load_examples(folder):
        apply(stack, obj)
        stack.log(f"applied examples/{folder} {obj['kind']}/{obj['metadata']['name']} {note}")
        spec = obj.get("spec") or {}
        tasks = spec.get("tasks")
        pods += sum(t.get("replicas", 1) for t in tasks) if tasks else int(spec.get("replicas", 1))
    return pods


@contextlib.contextmanager
def _volcano(stack: DemoStack, settings: Settings) -> Iterator[None]:
    """vc-controller-manager and vc-scheduler (built or reused like `make scheduler-bin`)."""
    build = VolcanoBuild.from_env(settings)
    binary = ensure_volcano(build).binary
    install_crds(stack.kube, build.crd_files())
    with running_volcano(binary, stack.kube, stack.kubeconfig, stack.workdir / "volcano"):
        stack.log(f"Volcano {build.version}: vc-scheduler and vc-controller-manager running")
        yield
