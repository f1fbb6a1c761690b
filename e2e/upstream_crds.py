"""Upstream CustomResourceDefinitions from their Go modules, installed on the local cluster, so
that the chart's objects of those kinds (prometheus-operator's monitors, cert-manager's
Certificate and Issuer) are validated by a real API server against the real schemas.

The module is fetched with `go mod download` into the cache's module cache (shared with the
other Go builds); `installed` creates the CRDs for a test module and removes the ones it made;
`strict_dry_run` sends an object with server-side strict field validation, and `kept` says
whether the API server stored all of it (a field the schema does not know is pruned, or refused
under strict validation)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.cluster.crds import CRDS, create_crds
from e2e.cluster.settings import Settings
from e2e.gobuild import download_module


@dataclass(frozen=True)
class CrdSource:
    """Where a module keeps the plain (not templated) v1 CRDs of the kinds we render."""

    module: str
    version: str
    directory: str  # inside the module
    files: Mapping[str, str]  # kind -> file name

    def crds(self, settings: Settings) -> dict[str, Json]:
        """kind -> its CustomResourceDefinition."""
        directory = self._module_dir(settings) / self.directory
        return {kind: yaml.safe_load((directory / name).read_text())
                for kind, name in self.files.items()}  # fmt: skip

    def _module_dir(self, settings: Settings) -> Path:
        env = {**os.environ, **settings.go_env, "GOFLAGS": "-mod=mod"}
        found = download_module(self.module, self.version, env=env, cwd=settings.cache_root)
        return Path(found["Dir"])


@contextmanager
def installed(kube: KubeClient, crds: Mapping[str, Json]) -> Iterator[dict[str, str]]:
    """The CRDs on the cluster (those already there are left alone); kind -> plural."""
    created = create_crds(kube, crds.values(), timeout_s=30)
    try:
        yield {kind: crd["spec"]["names"]["plural"] for kind, crd in crds.items()}
    finally:
        for name in created:
            kube.delete(f"{CRDS}/{name}")


def strict_dry_run(kube: KubeClient, obj: Json, api: str, plural: str, namespace: str) -> Json:
    """`obj` created in `namespace` as a dry run with strict field validation (`api`: e.g.
    ``cert-manager.io/v1``); what the API server would store."""
    path = f"/apis/{api}/namespaces/{namespace}/{plural}"
    body = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    return kube.request(
        "POST", path, body=body, query={"dryRun": "All", "fieldValidation": "Strict"}
    )


def kept(sent: Any, stored: Any) -> bool:
    """Whether everything `sent` is in `stored` (which may add the schema's defaults)."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(
            key in stored and kept(value, stored[key]) for key, value in sent.items()
        )
    if isinstance(sent, list):
        return (
            isinstance(stored, list)
            and len(sent) == len(stored)
            and all(kept(a, b) for a, b in zip(sent, stored, strict=True))
        )
    return bool(sent == stored)
