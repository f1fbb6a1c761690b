"""A GPU Deployment kept in Git, applied again and again by the real clients (issue 24): kubectl's
client-side apply, its server-side apply and `helm upgrade`, each through the real API server and
our webhook, translating at pod level (the chart's default) or at workload level
(``webhook.workloads: true``).

Each client applies the manifest, applies it unchanged (admitted, no rollout, and `kubectl diff`
finds nothing), then with a new image (the same share), then with more gpumem (a new share): each
time the Deployment's pods run with the share the manifest asks for, and no claim template is left
that no pod or workload names.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from e2e.chart.helmbin import ensure_helm
from e2e.cluster import KubeClient, LocalCluster, Settings
from e2e.cluster.client import Json
from e2e.dra_objects import quantity
from e2e.pods import claim_of, only_result
from e2e.waiting import wait_for
from e2e.webhook.conftest import GRACE_S
from e2e.webhook.helpers import serve_namespace, templates
from e2e.webhook.process import WebhookProcess, running_webhook

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
POD_LEVEL_LABEL = "e2e.vgpu-bridge.io/webhook-pod-level"
IMAGE = "registry.invalid/e2e/vllm:{}"


@pytest.fixture(scope="module")
def pod_level_webhook(
    kube: KubeClient, e2e_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    """Registered as the chart does by default: pods (and Volcano's objects) only."""
    workdir = tmp_path_factory.mktemp("webhook-pod-level")
    with running_webhook(
        kube, e2e_cluster.kubeconfig, workdir, grace_s=GRACE_S,
        namespace_label=POD_LEVEL_LABEL, workloads=False,
    ) as process:  # fmt: skip
        yield process
        print(process.log()[-4000:])


@pytest.fixture(params=["pod-level", "workload-level"])
def level(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def gitops_ns(request: pytest.FixtureRequest, kube: KubeClient, level: str) -> str:
    """A namespace served at `level`: the package's own webhook translates workloads too."""
    if level == "workload-level":
        return str(request.getfixturevalue("ns"))
    request.getfixturevalue("pod_level_webhook")
    namespace = str(request.getfixturevalue("namespace"))
    request.getfixturevalue("_our_agents")  # the kubelet stand-in prepares through our agents
    request.getfixturevalue("kubelet_standin").preparer = request.getfixturevalue("_our_agents")[1]
    serve_namespace(kube, namespace, POD_LEVEL_LABEL)
    return namespace


def deployment(image: str, gpumem: int) -> Json:
    container = {
        "name": "vllm",
        "image": IMAGE.format(image),
        "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": gpumem}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vllm", "labels": {"app": "vllm"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "vllm"}},
            "template": {
                "metadata": {"labels": {"app": "vllm"}},
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
            },
        },
    }


HELM_TEMPLATE = (
    yaml.safe_dump(deployment("IMAGE", 0))
    .replace("registry.invalid/e2e/vllm:IMAGE", "registry.invalid/e2e/vllm:{{ .Values.image }}")
    .replace("nvidia.com/gpumem: 0", "nvidia.com/gpumem: {{ .Values.gpumem }}")
)


@dataclass
class Client:
    """One way a user or a GitOps tool applies the manifest: `apply(image, gpumem)`."""

    name: str  # client-side | server-side | helm
    vgpu_k8s: Path  # the control plane's multi-call binary: `vgpu-k8s kubectl ...`
    kubeconfig: Path
    helm: Path
    workdir: Path
    namespace: str

    def apply(self, image: str, gpumem: int) -> None:
        if self.name == "helm":
            chart = self._chart()
            self._run(str(self.helm), "upgrade", "--install", "vllm", str(chart),
                      "-n", self.namespace, "--kubeconfig", str(self.kubeconfig),
                      "--set", f"image={image}", "--set", f"gpumem={gpumem}")  # fmt: skip
            return
        self._kubectl("apply", image, gpumem)

    def differs(self, image: str, gpumem: int) -> str:
        """What `kubectl diff` shows for the manifest (empty: nothing differs)."""
        return self._kubectl("diff", image, gpumem)

    def _kubectl(self, verb: str, image: str, gpumem: int) -> str:
        manifest = self.workdir / "vllm.yaml"
        manifest.write_text(yaml.safe_dump(deployment(image, gpumem)))
        flags = ["--server-side", "--field-manager=gitops"] if self.name == "server-side" else []
        return self._run(str(self.vgpu_k8s), "kubectl", "--kubeconfig", str(self.kubeconfig),
                         verb, "-n", self.namespace, "-f", str(manifest), *flags,
                         ok=(0, 1) if verb == "diff" else (0,))  # fmt: skip

    def _chart(self) -> Path:
        chart = self.workdir / "chart"
        (chart / "templates").mkdir(parents=True, exist_ok=True)
        (chart / "Chart.yaml").write_text("apiVersion: v2\nname: vllm\nversion: 0.1.0\n")
        (chart / "templates" / "deployment.yaml").write_text(HELM_TEMPLATE)
        return chart

    @staticmethod
    def _run(*command: str, ok: tuple[int, ...] = (0,)) -> str:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
        assert done.returncode in ok, f"{command[1:4]}: {done.stderr}"
        return done.stdout


@pytest.fixture(params=["client-side", "server-side", "helm"])
def client(
    request: pytest.FixtureRequest,
    e2e_cluster: LocalCluster,
    e2e_settings: Settings,
    gitops_ns: str,
    tmp_path: Path,
) -> Client:
    return Client(
        str(request.param),
        e2e_settings.binary,
        e2e_cluster.kubeconfig,
        ensure_helm(e2e_settings).binary,
        tmp_path,
        gitops_ns,
    )


def rolled_out(kube: KubeClient, namespace: str, image: str, gpumem: int) -> list[Json]:
    """The Deployment's pods once exactly one runs, with `image` and a share of `gpumem` MiB."""

    def done() -> list[Json] | None:
        live = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/vllm")
        status = live.get("status") or {}
        if status.get("observedGeneration") != live["metadata"]["generation"] or any(
            status.get(count) != 1 for count in ("replicas", "updatedReplicas", "readyReplicas")
        ):
            return None
        pods = kube.items(f"/api/v1/namespaces/{namespace}/pods", labelSelector="app=vllm")
        if len(pods) != 1 or pods[0]["status"].get("phase") != "Running":
            return None
        if pods[0]["spec"]["containers"][0]["image"] != IMAGE.format(image):
            return None
        return pods

    pods = wait_for(done, timeout_s=120, what=f"one vllm pod Running {image} with {gpumem} MiB")
    for pod in pods:
        assert "limits" not in pod["spec"]["containers"][0]["resources"]
        result = only_result(claim_of(kube, namespace, pod))
        assert result["driver"] == "gpu.vgpu-bridge.io"
        assert quantity(result["consumedCapacity"]["memory"]) == quantity(f"{gpumem}Mi")
    return pods


def named_templates(kube: KubeClient, namespace: str, pods: list[Json]) -> set[str]:
    """The templates `pods`, the Deployment and its ReplicaSets name. At workload level the old
    ReplicaSets (kept for `kubectl rollout undo`) keep their templates; at pod level none does."""
    workloads = [kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/vllm")]
    workloads += kube.items(f"/apis/apps/v1/namespaces/{namespace}/replicasets")
    specs = [p["spec"] for p in pods] + [w["spec"]["template"]["spec"] for w in workloads]
    return {c["resourceClaimTemplateName"] for s in specs for c in s.get("resourceClaims") or ()}


def no_orphaned_templates(kube: KubeClient, namespace: str, pods: list[Json]) -> None:
    wanted = named_templates(kube, namespace, pods)
    try:
        wait_for(
            lambda: set(templates(kube, namespace)) == wanted,
            timeout_s=GRACE_S + 30,
            what=f"only the templates in use ({sorted(wanted)}) left",
        )
    except AssertionError:
        every_pod = kube.items(f"/api/v1/namespaces/{namespace}/pods")
        named = {p["metadata"]["name"]: p["spec"].get("resourceClaims") for p in every_pod}
        raise AssertionError(f"templates {templates(kube, namespace)}; pods {named}") from None


def generation(kube: KubeClient, namespace: str) -> int:
    live = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/vllm")
    return int(live["metadata"]["generation"])


def test_gpu_deployment_applied_again_and_changed_runs_the_share_it_asks_for(
    kube: KubeClient, client: Client, level: str
) -> None:
    ns = client.namespace
    client.apply("0.6", 4000)
    pods = rolled_out(kube, ns, "0.6", 4000)
    translated = (
        "resourceClaims"
        in kube.get(f"/apis/apps/v1/namespaces/{ns}/deployments/vllm")["spec"]["template"]["spec"]
    )
    assert translated == (level == "workload-level")
    first = generation(kube, ns)

    client.apply("0.6", 4000)  # unchanged: admitted, nothing rolls out, nothing differs
    assert generation(kube, ns) == first
    assert rolled_out(kube, ns, "0.6", 4000) == pods
    if client.name != "helm":
        assert client.differs("0.6", 4000) == ""

    client.apply("0.7", 4000)
    pods = rolled_out(kube, ns, "0.7", 4000)
    no_orphaned_templates(kube, ns, pods)
    (same,) = named_templates(kube, ns, pods)

    client.apply("0.7", 8000)
    pods = rolled_out(kube, ns, "0.7", 8000)
    no_orphaned_templates(kube, ns, pods)
    (bigger,) = {c["resourceClaimTemplateName"] for c in pods[0]["spec"]["resourceClaims"]}
    assert bigger != same
    kept_for_rollback = {same} if level == "workload-level" else set()
    assert named_templates(kube, ns, pods) == {bigger} | kept_for_rollback
    if client.name != "helm":
        assert client.differs("0.7", 8000) == ""
