"""cert-manager's CRDs for Certificate, Issuer and ClusterIssuer (`e2e/upstream_crds.py`), so
that the chart's objects of `tls.mode: cert-manager` are validated against the real schemas."""

from __future__ import annotations

from e2e.upstream_crds import CrdSource

CERT_MANAGER = CrdSource(
    module="github.com/cert-manager/cert-manager",
    version="v1.19.1",  # its deploy/crds/ holds plain v1 CRDs of the kinds we render
    directory="deploy/crds",
    files={
        "Certificate": "cert-manager.io_certificates.yaml",
        "Issuer": "cert-manager.io_issuers.yaml",
        "ClusterIssuer": "cert-manager.io_clusterissuers.yaml",
    },
)
API = "cert-manager.io/v1"
