"""Bring the kind cluster up and down: the tier's dockerd, the node image, ``kind create cluster``,
networking, the chart's images, mock-GPU labels, ``helm upgrade --install``, Volcano
(``volcano.py``). Every step is a plain command a user could type; each is printed first, with
the time each stage took; a stage or command still running says so every 30 s.

``VGPU_BRIDGE_KIND_NODE_IMAGE`` (e.g. ``kindest/node:v1.36.1``) skips the local node image and
uses that one with kind's own networking (kindnetd): the path for machines with a registry.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml

from e2e.chart.helmbin import ensure_helm
from e2e.cluster import ensure_binary
from e2e.cluster.settings import REPO_ROOT, Settings
from e2e.kind import dockerd, host, network, volcano
from e2e.kind.build import KindTools, ensure_tools, tools_dir
from e2e.kind.chartimages import DOCKERFILES, build_chart_images, tag_examples_image
from e2e.kind.cudaimage import write_cuda_image
from e2e.kind.nodeimage import IMAGE_REPOSITORY, NodeInputs, ensure_node_image, kind_module_dir
from e2e.kind.steps import run, timed
from e2e.progress import progress
from e2e.realnode.build import ensure_runtime
from e2e.volcano.build import VolcanoBuild
from e2e.volcano.build import ensure_binary as ensure_volcano
from e2e.waiting import wait_for
from vgpu_bridge.kube import KubeApi

KIND_DIR = Path(__file__).resolve().parent
CONFIG = KIND_DIR / "kind-config.yaml"
VALUES = KIND_DIR / "values-kind.yaml"
CHART = REPO_ROOT / "charts" / "vgpu-bridge"
RELEASE = NAMESPACE = "vgpu-bridge"
# kind-config.yaml labels the GPU workers as the GPU operator does; the chart's default agent
# affinity (agent.gpuNodeLabels) selects them, so the CPU-only worker gets no agent.
GPU_NODE_LABEL = "nvidia.com/gpu.present=true"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# The chart's namespace, as docs/pod-security.md says to make it: the agent is privileged (host
# paths, host PID, the kubelet's plugin dirs), so its namespace enforces `privileged`, and warns
# and audits at `restricted`, which the webhook's pods meet.
NAMESPACE_LABELS = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}
IMAGES = DOCKERFILES
STOCK_IMAGE_ENV = "VGPU_BRIDGE_KIND_NODE_IMAGE"
Json = dict[str, Any]
T = TypeVar("T")


class KindUnavailable(RuntimeError):
    """The kind path cannot run on this machine (not root, no apt-get, ...)."""


@dataclass(frozen=True)
class Kind:
    name: str
    kubeconfig: Path
    helm: Path
    settings: Settings

    @classmethod
    def from_settings(cls, settings: Settings) -> Kind:
        config = yaml.safe_load(CONFIG.read_text())
        kubeconfig = settings.cache_root / "kind" / "kubeconfig"
        return cls(config["name"], kubeconfig, ensure_helm(settings).binary, settings)

    def image(self, part: str) -> str:
        image = yaml.safe_load(VALUES.read_text())["image"]
        return f"{image[part]['repository']}:{image['tag']}"

    @property
    def state_file(self) -> Path:
        return self.settings.cache_root / "state" / "kind" / "host.json"

    @property
    def data_root(self) -> Path:
        """The private dockerd's data root: built images stay there between runs."""
        return self.settings.cache_root / "kind-docker"

    @property
    def kind_binary(self) -> Path:
        return tools_dir(self.settings) / "kind"

    @property
    def kubectl(self) -> list[str]:
        """kubectl (the tier's ``vgpu-kind-k8s``) pointed at the cluster."""
        return [str(tools_dir(self.settings) / "kubectl"), f"--kubeconfig={self.kubeconfig}"]

    @property
    def volcano(self) -> VolcanoBuild:
        return VolcanoBuild.from_env(self.settings)


def cgroup_v1() -> bool:
    return not Path("/sys/fs/cgroup/cgroup.controllers").is_file()


def cluster_config(node_image: str, *, local_image: bool, v1: bool, restrict_oom: bool) -> Json:
    """kind-config.yaml with the node image and what this host and a local image need."""
    config: Json = yaml.safe_load(CONFIG.read_text())
    for node in config["nodes"]:
        node["image"] = node_image
    return host_additions(config, local_image=local_image, v1=v1, restrict_oom=restrict_oom)


def host_additions(config: Json, *, local_image: bool, v1: bool, restrict_oom: bool) -> Json:
    """`config` (a kind config, changed in place) with what this host and a local node image
    need: the tier's clusters and the recipe's plainly made one get the same."""
    patches = list(config.get("kubeadmConfigPatches") or [])
    if local_image:  # no pulls: every control-plane image is pre-imported under this name
        patches.append(f"kind: ClusterConfiguration\nimageRepository: {IMAGE_REPOSITORY}\n")
        config["networking"] = {"disableDefaultCNI": True}
    if v1:  # kubelet >= 1.35 refuses cgroup v1 unless told not to
        patches.append("kind: KubeletConfiguration\nfailCgroupV1: false\n")
    if restrict_oom:  # runc in a node cannot lower oom_score_adj without CAP_SYS_RESOURCE
        config.setdefault("containerdConfigPatches", []).append(
            '[plugins."io.containerd.grpc.v1.cri"]\n  restrict_oom_score_adj = true'
        )
    if patches:
        config["kubeadmConfigPatches"] = patches
    return config


def up(kind: Kind) -> dict[str, float]:
    """Everything from a bare machine to the chart and Volcano installed; seconds per stage."""
    timings: dict[str, float] = {}
    stage = partial(_stage, timings)
    tools = stage("build and start dockerd", lambda: prepare(kind))
    node_image = stage("node image", lambda: node_image_for(kind.settings, tools))
    stage("cluster Ready", lambda: create_cluster(kind, node_image))
    stage("chart images built and loaded", lambda: load_images(kind))
    stage("Volcano images built and loaded", lambda: load_volcano_images(kind))
    stage("chart installed, all pods Ready", lambda: install(kind))
    stage("Volcano installed, its two Deployments Ready", lambda: install_volcano(kind))
    return timings


def _stage(timings: dict[str, float], label: str, work: Callable[[], T]) -> T:
    """One stage of ``up``: a progress line every 30 s while it runs, its time at the end."""
    started = time.monotonic()
    with progress(f"kind up: {label}", total_after_s=None):
        result = work()
    timed(label, timings, started)
    return result


def prepare(kind: Kind) -> KindTools:
    """Packages and binaries (built or reused), the host's state recorded, dockerd started."""
    if os.geteuid() != 0:
        raise KindUnavailable("the kind tier runs its own dockerd and needs root")
    dockerd.ensure_packages()
    ensure_runtime(kind.settings)
    ensure_binary(kind.settings)
    ensure_volcano(kind.volcano)
    tools = ensure_tools(kind.settings)
    host.start_dockerd(kind.data_root, kind.state_file)
    return tools


def node_image_for(settings: Settings, tools: KindTools) -> str:
    """``VGPU_BRIDGE_KIND_NODE_IMAGE`` if set, else the locally built node image."""
    stock = os.environ.get(STOCK_IMAGE_ENV)
    if stock:
        return stock
    inputs = NodeInputs(
        tools=tools,
        runtime_dir=ensure_runtime(settings).bin_dir,
        vgpu_k8s=settings.binary,
        kind_module=kind_module_dir(settings),
    )
    return ensure_node_image(settings, inputs)


def _kind(kind: Kind, *args: str) -> str:
    return run([str(kind.kind_binary), *args], env=dockerd.docker_env())


def delete_cluster(kind: Kind) -> None:
    """``kind delete cluster`` when there is one of that name."""
    if kind.name in _kind(kind, "get", "clusters").split():
        _kind(kind, "delete", "cluster", "--name", kind.name)


def create_cluster(
    kind: Kind, node_image: str, configure: Callable[[Json], None] | None = None
) -> None:
    """The tier's cluster (kind-config.yaml, ``cluster_config``); ``configure`` may change the
    kind config first (e.g. another tier's mounts and labels)."""
    local = STOCK_IMAGE_ENV not in os.environ
    config = cluster_config(
        node_image,
        local_image=local,
        v1=cgroup_v1(),
        restrict_oom=dockerd.host_lacks_cap_sys_resource(),
    )
    if configure is not None:
        configure(config)
    create_from_config(kind, config, local_image=local)


def create_from_config(
    kind: Kind, config: Json, *, local_image: bool, extra_args: Sequence[str] = ()
) -> None:
    """``kind create cluster --config <config> [extra_args]`` (deleting a left-over one first);
    pod networking where the local node image brings no CNI (``network.wire``); nodes Ready."""
    kind.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    delete_cluster(kind)
    path = kind.kubeconfig.parent / "kind-config.generated.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    _kind(kind, "create", "cluster", "--config", str(path), *extra_args,
          "--kubeconfig", str(kind.kubeconfig))  # fmt: skip
    api = KubeApi.connect(str(kind.kubeconfig), timeout_s=30)
    if local_image:
        cidrs = partial(_all_nodes_have_pod_cidrs, api, len(config["nodes"]))
        wait_for(cidrs, timeout_s=120, what="every node's podCIDR", interval_s=1)
        network.wire(api)
    ready = partial(_all_nodes_ready, api, len(config["nodes"]))
    wait_for(ready, timeout_s=300, what="all nodes Ready", interval_s=1)


def _all_nodes_have_pod_cidrs(api: KubeApi, count: int) -> bool:
    nodes = api.list("/api/v1/nodes")["items"]
    return len(nodes) == count and all(n["spec"].get("podCIDR") for n in nodes)


def _all_nodes_ready(api: KubeApi, count: int) -> bool:
    nodes = api.list("/api/v1/nodes")["items"]
    ready = [
        n
        for n in nodes
        for c in n.get("status", {}).get("conditions") or []
        if c["type"] == "Ready" and c["status"] == "True"
    ]
    return len(ready) == count


def load_images(kind: Kind) -> None:
    """Build the chart's images, the examples' and the CUDA test image; load them into kind."""
    images = {part: kind.image(part) for part in IMAGES}
    build_chart_images(kind.settings, images, offline=STOCK_IMAGE_ENV not in os.environ)
    examples = tag_examples_image(kind.settings)
    for image in (*images.values(), examples):
        _kind(kind, "load", "docker-image", image, "--name", kind.name)
    archive = kind.settings.cache_root / "kind" / "cuda-image.tar"
    write_cuda_image(ensure_runtime(kind.settings), archive)
    _kind(kind, "load", "image-archive", str(archive), "--name", kind.name)


def load_volcano_images(kind: Kind) -> None:
    """Build vc-scheduler's and vc-controller-manager's images and load both into kind."""
    offline = STOCK_IMAGE_ENV not in os.environ
    images = volcano.build_images(kind.settings, kind.volcano, offline=offline)
    _kind(kind, "load", "docker-image", *images, "--name", kind.name)


def install_volcano(kind: Kind) -> None:
    """Volcano's CRDs and RBAC (from its module), its scheduler configuration, both components."""
    volcano.install(kind.kubectl, kind.volcano, kind.kubeconfig.parent)


def install(kind: Kind, *extra: str) -> None:
    """The chart's namespace, Pod Security labels on it, then ``helm upgrade --install --wait``."""
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": NAMESPACE, "labels": NAMESPACE_LABELS}}  # fmt: skip
    run([*kind.kubectl, "apply", "-f", "-"], input_text=yaml.safe_dump(namespace))
    run([
        str(kind.helm), "upgrade", "--install", RELEASE, str(CHART),
        "--namespace", NAMESPACE, "--values", str(VALUES),
        "--kubeconfig", str(kind.kubeconfig), "--wait", "--timeout", "5m", *extra,
    ])  # fmt: skip


def down(kind: Kind) -> host.Restored:
    """Delete the cluster and the tier's containers and networks, stop dockerd, put the host
    back as recorded (also after a crash: everything is found from fixed names and the record;
    a killed dockerd is started again first, which ends the containers it left running)."""
    if dockerd.running_pid() is None and kind.data_root.is_dir() and shutil.which("dockerd"):
        dockerd.start(kind.data_root)
    if dockerd.running_pid() is not None:
        env = dockerd.docker_env()
        if kind.kind_binary.is_file():
            run([str(kind.kind_binary), "delete", "cluster", "--name", kind.name], env=env)
        leftover = run(["docker", "ps", "-aq"], env=env, quiet=True).split()
        if leftover:
            run(["docker", "rm", "-f", "-v", *leftover], env=env)
        run(["docker", "network", "prune", "-f"], env=env)
        run(["docker", "volume", "prune", "-f"], env=env)
    restored = host.stop_dockerd(kind.data_root, kind.state_file)
    kind.kubeconfig.unlink(missing_ok=True)
    return restored
