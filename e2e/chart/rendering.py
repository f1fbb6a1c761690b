"""Run helm on the chart: lint, and template into Kubernetes objects (or its error)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.settings import REPO_ROOT

CHART = REPO_ROOT / "charts" / "vgpu-bridge"
KUBE_VERSION = "v1.36.3"
#: The chart refuses to render without image.registry (an unqualified image name pulls from
#: Docker Hub). Every render here names this file's registry first, so a test's own values (a
#: file, or ``values``) decide: a registry of its own, or "" to see the refusal.
REGISTRY_VALUES = Path(__file__).with_name("values-test-registry.yaml")
RENDERING_COMMANDS = frozenset({"template", "install", "upgrade", "lint"})
Json = dict[str, Any]


class HelmFailed(AssertionError):
    """helm exited non-zero; the message is its output."""


@dataclass(frozen=True)
class Helm:
    binary: Path

    def run(self, *args: str, values: Mapping[str, Any] | None = None) -> str:
        """helm's stdout; HelmFailed (with stderr) when it exits non-zero. ``values`` (if given)
        go in as a values file. A command that renders the chart gets REGISTRY_VALUES first."""
        if args and args[0] in RENDERING_COMMANDS:
            args = (args[0], "--values", str(REGISTRY_VALUES), *args[1:])
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
            json.dump(dict(values or {}), file)  # JSON is YAML
            file.flush()
            extra = [] if values is None else ["--values", file.name]
            command = [str(self.binary), *args, *extra]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise HelmFailed(done.stderr + done.stdout)
        return done.stdout

    def lint(self, values: Mapping[str, Any] | None = None) -> str:
        return self.run(
            "lint", "--strict", str(CHART), "--namespace", "vgpu-bridge", values=values or {}
        )

    def template(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        release: str = "vgpu-bridge",
        namespace: str = "vgpu-bridge",
        kube_version: str = KUBE_VERSION,
    ) -> list[Json]:
        """The rendered objects, in helm's order, for a cluster of ``kube_version``."""
        out = self.run(
            "template", release, str(CHART), "--namespace", namespace,
            "--kube-version", kube_version, values=values or {},
        )  # fmt: skip
        return [doc for doc in yaml.safe_load_all(out) if doc]

    def template_error(self, values: Mapping[str, Any] | None = None, **kwargs: str) -> str:
        """helm's message for values it must refuse (fails the test if it renders)."""
        try:
            self.template(values, **kwargs)
        except HelmFailed as failed:
            return str(failed)
        raise AssertionError(f"helm template accepted {values!r}")


def of_kind(objects: list[Json], kind: str) -> list[Json]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[Json], kind: str) -> Json:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


def containers(workload: Json) -> Iterator[Json]:
    spec = workload["spec"]["template"]["spec"]
    yield from spec.get("initContainers") or ()
    yield from spec["containers"]


def env_names(container: Json) -> list[str]:
    return [var["name"] for var in container.get("env") or ()]
