"""CustomResourceDefinitions on the private control plane: created (one already there is kept)
and waited for until the API server serves them (Established)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml

from e2e.cluster.client import ApiError, Json, KubeClient
from e2e.waiting import wait_for

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def crds_in(files: Iterable[Path]) -> list[Json]:
    """Every CRD document of ``files`` (multi-document YAML), in order."""
    return [crd for file in files for crd in yaml.safe_load_all(file.read_text()) if crd]


def create_crds(kube: KubeClient, crds: Iterable[Json], *, timeout_s: float = 60) -> list[str]:
    """Create each CRD and wait until every one is Established; the names of those this call
    created (the others were there already)."""
    names, created = [], []
    for crd in crds:
        names.append(crd["metadata"]["name"])
        try:
            kube.create(CRDS, crd)
            created.append(names[-1])
        except ApiError as error:
            if error.status != 409:
                raise
    wait_for(
        lambda: all(established(kube.get(f"{CRDS}/{name}")) for name in names),
        timeout_s=timeout_s,
        what=f"CRDs {names} Established",
    )
    return created


def established(crd: Json) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
