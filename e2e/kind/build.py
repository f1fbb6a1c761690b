"""Build (or reuse) the Go programs of the kind tier, each from its published Go module.

Into ``<cache>/kind-<KIND_VERSION>/bin``: kind itself, crictl and the CNI plugins (each with
``go install module@version``, so each keeps its own go.mod), CoreDNS with kubeadm's plugins only
(``e2e/kind/corednstool``), and ``vgpu-kind-k8s`` (kubeadm, kubectl and kube-proxy, from
``e2e/kind/gotools`` at the control plane's Kubernetes release). containerd, its shim, ctr,
runc and the static pause come from the real-node tier's build (``e2e.realnode.build``), the
kubelet, etcd and the control plane from the cluster's ``vgpu-k8s``: nothing is built twice. A
stamp records what was built; a step reruns only when its version (or its module's files)
changed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.settings import Settings
from e2e.gobuild import build_lock, read_stamp, sources_digest
from e2e.kind.steps import run

KIND_VERSION = "v0.33.0"
CRICTL_VERSION = "v1.37.0"
CNI_VERSION = "v1.10.0"
COREDNS_VERSION = "v1.14.2"
GOTOOLS_DIR = Path(__file__).resolve().parent / "gotools"
COREDNS_DIR = Path(__file__).resolve().parent / "corednstool"
CNI_PLUGINS = ("ipam/host-local", "main/loopback", "main/ptp", "meta/portmap")
K8S_TOOLS = ("kubeadm", "kubectl", "kube-proxy")
#: step -> (the packages ``go install`` builds, the binaries it leaves)
GO_INSTALLS = {
    "kind": ([f"sigs.k8s.io/kind@{KIND_VERSION}"], ["kind"]),
    "crictl": ([f"sigs.k8s.io/cri-tools/cmd/crictl@{CRICTL_VERSION}"], ["crictl"]),
    "cni": (
        [f"github.com/containernetworking/plugins/plugins/{p}@{CNI_VERSION}" for p in CNI_PLUGINS],
        [p.split("/")[1] for p in CNI_PLUGINS],
    ),
}


@dataclass(frozen=True)
class KindTools:
    bin_dir: Path
    #: step -> seconds, for the steps that ran (empty when everything was reused)
    steps: dict[str, float]

    def path(self, name: str) -> Path:
        return self.bin_dir / name


def tools_dir(settings: Settings) -> Path:
    return settings.cache_root / f"kind-{KIND_VERSION}" / "bin"


def wanted_stamp(settings: Settings) -> dict[str, str]:
    """What each step's binaries were built from; a step whose entry differs is rebuilt."""
    versions = {"kind": KIND_VERSION, "crictl": CRICTL_VERSION, "cni": CNI_VERSION}
    module_files = ("go.mod", "go.sum", "main.go")
    versions["coredns"] = COREDNS_VERSION + ":" + sources_digest(COREDNS_DIR, module_files)
    versions["k8s"] = settings.k8s_version + ":" + sources_digest(GOTOOLS_DIR, module_files)
    return versions


def ensure_tools(settings: Settings) -> KindTools:
    """Every Go program of the tier, built when missing or stale (one build at a time)."""
    directory = tools_dir(settings)
    with build_lock(directory):
        return _ensure_locked(settings, directory)


def _ensure_locked(settings: Settings, directory: Path) -> KindTools:
    stamp = directory / "kind-tools.stamp"
    recorded = read_stamp(stamp)
    wanted = wanted_stamp(settings)
    steps: dict[str, float] = {}
    env = {**os.environ, **settings.go_env, "GOBIN": str(directory)}
    for step, (packages, binaries) in GO_INSTALLS.items():
        present = all((directory / name).is_file() for name in binaries)
        if recorded.get(step) != wanted[step] or not present:
            started = time.monotonic()
            run(["go", "install", "-trimpath", "-ldflags=-s -w", *packages], env=env, cwd=Path("/"))
            steps[step] = round(time.monotonic() - started, 1)
    if recorded.get("coredns") != wanted["coredns"] or not (directory / "coredns").is_file():
        started = time.monotonic()
        _go_build(settings, COREDNS_DIR, directory / "coredns", "-s -w")
        steps["coredns"] = round(time.monotonic() - started, 1)
    if recorded.get("k8s") != wanted["k8s"] or not (directory / "vgpu-kind-k8s").is_file():
        started = time.monotonic()
        _go_build(settings, GOTOOLS_DIR, directory / "vgpu-kind-k8s", _k8s_ldflags(settings))
        steps["k8s"] = round(time.monotonic() - started, 1)
    for name in K8S_TOOLS:
        link = directory / name
        link.unlink(missing_ok=True)
        link.symlink_to("vgpu-kind-k8s")
    stamp.write_text(json.dumps(wanted))
    return KindTools(directory, steps)


def _k8s_ldflags(settings: Settings) -> str:
    version = "k8s.io/component-base/version"
    major, minor = settings.minor.split(".")
    return (
        f"-s -w -X {version}.gitVersion={settings.k8s_version} "
        f"-X {version}.gitMajor={major} -X {version}.gitMinor={minor}"
    )


def _go_build(settings: Settings, module: Path, output: Path, ldflags: str) -> None:
    partial = output.with_name(output.name + ".partial")
    command = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), "."]
    run(command, env={**os.environ, **settings.go_env}, cwd=module)
    partial.replace(output)


def report(tools: KindTools) -> str:
    if not tools.steps:
        return f"kind-tools: warm, reused {tools.bin_dir}"
    steps = ", ".join(f"{name} {seconds:.0f}s" for name, seconds in tools.steps.items())
    return f"kind-tools: built into {tools.bin_dir} ({steps})"
