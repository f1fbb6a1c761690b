"""cert-manager's CRDs for Certificate and Issuer, from its Go module (`go mod download` into the
cache's module cache, shared with the other Go builds), so that the chart's objects of
`tls.mode: cert-manager` are validated by a real API server against the real schemas."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from e2e.cluster.client import Json
from e2e.cluster.settings import Settings

MODULE = "github.com/cert-manager/cert-manager"
#: A release whose deploy/crds/ holds plain (not templated) v1 CRDs of the kinds we render.
VERSION = "v1.19.1"
CRD_FILES = {
    "Certificate": "cert-manager.io_certificates.yaml",
    "Issuer": "cert-manager.io_issuers.yaml",
    "ClusterIssuer": "cert-manager.io_clusterissuers.yaml",
}


class CertManagerCrdError(RuntimeError):
    """The module could not be downloaded; the message carries go's output."""


def cert_manager_crds(settings: Settings) -> dict[str, Json]:
    """kind -> its CustomResourceDefinition, for the kinds in CRD_FILES."""
    directory = _module_dir(settings) / "deploy" / "crds"
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
        raise CertManagerCrdError(
            f"{' '.join(command)} failed:\n{(done.stdout + done.stderr)[-3000:]}"
        )
    return Path(json.loads(done.stdout)["Dir"])
