"""Bring the kind cluster up (create, build and load images, label mock-GPU nodes, install the
chart) and down. Every step is a plain command a user could type; each is printed first."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.chart.helmbin import ensure_helm
from e2e.cluster.settings import REPO_ROOT, Settings
from vgpu_bridge.kube import KubeApi

KIND_DIR = Path(__file__).resolve().parent
CONFIG = KIND_DIR / "kind-config.yaml"
VALUES = KIND_DIR / "values-kind.yaml"
CHART = REPO_ROOT / "charts" / "vgpu-bridge"
RELEASE = NAMESPACE = "vgpu-bridge"
MOCK_GPU_LABEL = "vgpu-bridge.io/mock-gpus=true"
IMAGES = {"webhook": KIND_DIR / "Dockerfile.webhook", "agent": KIND_DIR / "Dockerfile.agent"}


class KindUnavailable(RuntimeError):
    """Docker or kind is missing: the kind path cannot run on this machine."""


@dataclass(frozen=True)
class Kind:
    name: str
    kubeconfig: Path
    helm: Path

    @classmethod
    def from_settings(cls, settings: Settings) -> Kind:
        config = yaml.safe_load(CONFIG.read_text())
        kubeconfig = settings.cache_root / "kind" / "kubeconfig"
        return cls(config["name"], kubeconfig, ensure_helm(settings).binary)

    def image(self, part: str) -> str:
        values = yaml.safe_load(VALUES.read_text())
        image = values[f"{part}Image"]
        return f"{image['repository']}:{image['tag']}"


def _run(command: Sequence[str]) -> str:
    print("+", " ".join(command), flush=True)
    done = subprocess.run(list(command), check=True, capture_output=True, text=True)
    return done.stdout


def _require_tools() -> None:
    missing = [tool for tool in ("docker", "kind") if shutil.which(tool) is None]
    if missing:
        raise KindUnavailable(f"the kind path needs {' and '.join(missing)} on PATH")


def up(kind: Kind) -> None:
    _require_tools()
    kind.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    if kind.name not in _run(["kind", "get", "clusters"]).split():
        _run(
            [
                "kind",
                "create",
                "cluster",
                "--config",
                str(CONFIG),
                "--kubeconfig",
                str(kind.kubeconfig),
            ]
        )
    for part, dockerfile in IMAGES.items():
        _run(["docker", "build", "-f", str(dockerfile), "-t", kind.image(part), str(REPO_ROOT)])
        _run(["kind", "load", "docker-image", kind.image(part), "--name", kind.name])
    for node in _run(["kind", "get", "nodes", "--name", kind.name]).split():
        if not node.endswith("control-plane"):
            _label_mock_gpu_node(kind, node)
    _run([
        str(kind.helm), "upgrade", "--install", RELEASE, str(CHART),
        "--namespace", NAMESPACE, "--create-namespace", "--values", str(VALUES),
        "--kubeconfig", str(kind.kubeconfig), "--wait", "--timeout", "5m",
    ])  # fmt: skip


def _label_mock_gpu_node(kind: Kind, node: str) -> None:
    """Label a worker for the mock-GPU agent through the API (no kubectl needed)."""
    key, value = MOCK_GPU_LABEL.split("=")
    api = KubeApi.connect(str(kind.kubeconfig), timeout_s=30)
    api.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {key: value}}})


def down(kind: Kind) -> None:
    _require_tools()
    _run(["kind", "delete", "cluster", "--name", kind.name])
    kind.kubeconfig.unlink(missing_ok=True)
