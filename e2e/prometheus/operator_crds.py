"""prometheus-operator's CRDs for ServiceMonitor, PodMonitor and PrometheusRule, from its Go
module (`go mod download` into the cache's module cache, shared with the other Go builds), so
that the chart's monitoring objects are validated by a real API server against the real schemas.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from e2e.cluster.client import Json
from e2e.cluster.settings import Settings

MODULE = "github.com/prometheus-operator/prometheus-operator"
#: A release whose example/prometheus-operator-crd/ holds the v1 CRDs of the kinds we render.
VERSION = "v0.85.0"
CRD_FILES = {
    "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}


class OperatorCrdError(RuntimeError):
    """The module could not be downloaded; the message carries go's output."""


def operator_crds(settings: Settings) -> dict[str, Json]:
    """kind -> its CustomResourceDefinition, for the kinds in CRD_FILES."""
    directory = _module_dir(settings) / "example" / "prometheus-operator-crd"
    return {
        kind: yaml.safe_load((directory / name).read_text()) for kind, name in CRD_FILES.items()
    }


def _module_dir(settings: Settings) -> Path:
    command = ["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"]
    done = subprocess.run(
        command,
        cwd=settings.cache_root,
        env={**os.environ, **settings.go_env, "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise OperatorCrdError(
            f"{' '.join(command)} failed:\n{(done.stdout + done.stderr)[-3000:]}"
        )
    return Path(json.loads(done.stdout)["Dir"])
