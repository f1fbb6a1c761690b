"""``python -m e2e.kind.recipe``: the kind e2e recipe (docs/kind-e2e.md) as another project runs
it, on a kind cluster made the plain way; run by ``make e2e-kind`` after the tier's scenarios.

1. ``kind create cluster --config e2e/kind/plain/kind-config.yaml --image <our node image>``,
   where the only additions to that file are what our offline node image and this machine need
   and the tier's own clusters get too (``plain_config``: ``cluster.host_additions``); then pod
   networking as kindnetd would set it up (``network.wire``: kindnetd is not a Go module we can
   build).
2. ``hack/kind-e2e.sh all`` with the images the tier built (``--images docker --tag kind``),
   each of its three commands timed.
3. ``examples/kind-e2e/test_gpu_sharing.py`` copied alone into an empty directory and run there
   with kube-scheduler, then the shell variant ``gpu-sharing.sh``.
4. Volcano (``volcano.py``'s offline install: the images the tier built, loaded), the chart
   upgraded with ``volcano.enabled=true`` by the same script, and the suite with
   ``SCHEDULER=volcano``.
5. The cluster deleted (also when a step failed). The seconds of each step are printed as a
   table at the end (bench/results/kind-e2e-2026-12-07.md).

Needs the tier's dockerd with the chart's images built (``python -m e2e.kind up`` ran).
``--delete-tier-cluster`` first deletes the tier's own cluster (``make e2e-kind`` passes it once
its scenarios are done: ``down`` would delete it anyway) so the two clusters never share the
machine's two cores.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from e2e.cluster.settings import REPO_ROOT, Settings
from e2e.kind import dockerd, volcano
from e2e.kind.build import ensure_tools, tools_dir
from e2e.kind.cluster import (
    STOCK_IMAGE_ENV,
    Kind,
    cgroup_v1,
    create_from_config,
    delete_cluster,
    host_additions,
    node_image_for,
)
from e2e.kind.steps import StepError, run

CONFIG = Path(__file__).resolve().parent / "plain" / "kind-config.yaml"
SCRIPT = REPO_ROOT / "hack" / "kind-e2e.sh"
SUITE = REPO_ROOT / "examples" / "kind-e2e"
SUITE_FILES = ("test_gpu_sharing.py", "cuda_share_probe.py", "gpu-sharing.sh")
#: what the tier builds and loads (values-kind.yaml): vgpu-bridge-<part>:kind
IMAGE_TAG = "kind"
#: an offline image with python3 (glibc, non-root): the webhook's, loaded by the recipe anyway
PYTHON_IMAGE = f"docker.io/library/vgpu-bridge-webhook:{IMAGE_TAG}"
SCRIPT_TIME = re.compile(r"^kind-e2e: (load|install|wait|all): ([0-9.]+)s$")
Json = dict[str, Any]
T = TypeVar("T")


def plain_config(*, local_image: bool, v1: bool, restrict_oom: bool) -> Json:
    """The plain config plus what our offline node image needs (no pulls: kubeadm's images are
    pre-imported under IMAGE_REPOSITORY; no kindnetd) and what this host needs, exactly as the
    tier's own clusters get them (``cluster.host_additions``)."""
    plain: Json = yaml.safe_load(CONFIG.read_text())
    return host_additions(plain, local_image=local_image, v1=v1, restrict_oom=restrict_oom)


class Recipe:
    """One run against the plain cluster: each step timed into ``timings``."""

    def __init__(self, tier: Kind) -> None:
        config = yaml.safe_load(CONFIG.read_text())
        kubeconfig = tier.settings.cache_root / "kind-plain" / "kubeconfig"
        self.tier = tier
        self.kind = Kind(config["name"], kubeconfig, tier.helm, tier.settings)
        self.timings: dict[str, float] = {}
        self.failures: list[str] = []

    def env(self, **extra: str) -> dict[str, str]:
        tools = tools_dir(self.kind.settings)
        return {
            **dockerd.docker_env(),
            "KIND": str(tools / "kind"),
            "KUBECTL": str(tools / "kubectl"),
            "HELM": str(self.kind.helm),
            "KUBECONFIG": str(self.kind.kubeconfig),
            **extra,
        }

    def timed(self, label: str, work: Callable[[], T]) -> T:
        started = time.monotonic()
        try:
            return work()
        finally:
            self.timings[label] = round(time.monotonic() - started, 1)
            print(f"== recipe: {label}: {self.timings[label]:.1f}s", flush=True)

    def kind_command(self, *args: str) -> str:
        return run([str(self.kind.kind_binary), *args], env=dockerd.docker_env())

    def create(self) -> None:
        """``kind create cluster --config ... --image ...``, then pod networking, nodes Ready."""
        node_image = node_image_for(self.kind.settings, ensure_tools(self.kind.settings))
        local = STOCK_IMAGE_ENV not in os.environ
        config = plain_config(local_image=local, v1=cgroup_v1(),
                              restrict_oom=dockerd.host_lacks_cap_sys_resource())  # fmt: skip
        create_from_config(self.kind, config, local_image=local, extra_args=("--image", node_image))

    def delete(self) -> None:
        delete_cluster(self.kind)

    def script(self, *args: str) -> None:
        """``hack/kind-e2e.sh`` against the plain cluster; its own timings recorded."""
        common = ["--name", self.kind.name, "--images", "docker", "--tag", IMAGE_TAG]
        output = stream([str(SCRIPT), *common, *args], env=self.env())
        for line in output.splitlines():
            match = SCRIPT_TIME.match(line)
            if match and args[0] == "all":
                self.timings[f"hack/kind-e2e.sh {match[1]}"] = float(match[2])

    def suite(self, workdir: Path, scheduler: str) -> None:
        """The pytest suite, our kubectl plugin on PATH (its status test then must pass)."""
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
        env = self.env(SCHEDULER=scheduler, PYTHON_IMAGE=PYTHON_IMAGE, PATH=path,
                       KUBECTL_VGPU="required")  # fmt: skip
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "test_gpu_sharing.py"]  # fmt: skip
        stream(command, env=env, cwd=workdir)

    def shell_suite(self, workdir: Path) -> None:
        env = self.env(SCHEDULER="default-scheduler", PYTHON_IMAGE=PYTHON_IMAGE)
        stream(["bash", str(workdir / "gpu-sharing.sh")], env=env, cwd=workdir)

    def volcano(self) -> None:
        build = self.kind.volcano
        images = [volcano.image(component, build.version) for component in volcano.COMPONENTS]
        self.kind_command("load", "docker-image", *images, "--name", self.kind.name)
        volcano.install(self.kind.kubectl, build, self.kind.kubeconfig.parent)

    def step(self, label: str, work: Callable[[], object]) -> None:
        """A step whose failure is recorded and does not stop the steps after it."""
        try:
            self.timed(label, work)
        except (StepError, AssertionError) as error:
            self.failures.append(f"{label}: {error}")
            print(f"recipe: {label} failed: {error}", file=sys.stderr, flush=True)

    def run(self) -> int:
        with tempfile.TemporaryDirectory(prefix="kind-e2e-suite-") as directory:
            workdir = Path(directory)
            for name in SUITE_FILES:  # the suite as a project copies it: alone, no conftest
                shutil.copy2(SUITE / name, workdir / name)
            try:
                self.timed("kind create cluster (plain config), nodes Ready", self.create)
                self.timed("hack/kind-e2e.sh all", lambda: self.script("all"))
                self.step(
                    "pytest, kube-scheduler", lambda: self.suite(workdir, "default-scheduler")
                )
                self.step("gpu-sharing.sh, kube-scheduler", lambda: self.shell_suite(workdir))
                self.timed("Volcano installed (offline images loaded)", self.volcano)
                volcano_values = ["--set", "volcano.enabled=true", "--set",
                                  f"volcano.version={self.kind.volcano.version}"]  # fmt: skip
                self.timed("hack/kind-e2e.sh install (volcano.enabled)",
                           lambda: self.script("install", *volcano_values))  # fmt: skip
                self.step("pytest, SCHEDULER=volcano", lambda: self.suite(workdir, "volcano"))
            except StepError as error:
                self.failures.append(str(error))
                print(f"recipe: {error}", file=sys.stderr, flush=True)
            finally:
                self.timed("kind delete cluster", self.delete)
        print(self.table(), flush=True)
        for failure in self.failures:
            print(f"recipe: FAILED {failure.splitlines()[0]}", file=sys.stderr)
        return 1 if self.failures else 0

    def table(self) -> str:
        rows = "\n".join(
            f"| {label} | {seconds:.1f} s |" for label, seconds in self.timings.items()
        )
        return f"| step (plain kind cluster) | time |\n| --- | --- |\n{rows}"


def stream(command: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None) -> str:
    """Run ``command``, its output shown as it comes; the output, or StepError."""
    print("+", " ".join(command), flush=True)
    lines = []
    with subprocess.Popen(
        list(command), env=dict(env), cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    ) as process:  # fmt: skip
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
            lines.append(line)
    if process.returncode != 0:
        tail = "".join(lines)[-4000:]
        raise StepError(f"{' '.join(command)} failed ({process.returncode}):\n{tail}")
    return "".join(lines)


def main(argv: list[str]) -> int:
    if argv not in ([], ["--delete-tier-cluster"]):
        print("usage: python -m e2e.kind.recipe [--delete-tier-cluster]", file=sys.stderr)
        return 2
    if dockerd.running_pid() is None:
        print("recipe: the tier's dockerd is not running: python -m e2e.kind up first",
              file=sys.stderr)  # fmt: skip
        return 2
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    recipe = Recipe(Kind.from_settings(Settings.from_env()))
    if argv:
        delete_cluster(recipe.tier)
    return recipe.run()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
