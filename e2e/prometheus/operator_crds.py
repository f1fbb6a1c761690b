"""prometheus-operator's CRDs for ServiceMonitor, PodMonitor and PrometheusRule
(`e2e/upstream_crds.py`), so that the chart's monitoring objects are validated against the real
schemas."""

from __future__ import annotations

from e2e.upstream_crds import CrdSource

PROMETHEUS_OPERATOR = CrdSource(
    module="github.com/prometheus-operator/prometheus-operator",
    version="v0.85.0",  # its example/prometheus-operator-crd/ holds the v1 CRDs we render
    directory="example/prometheus-operator-crd",
    files={
        "ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
        "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
        "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
    },
)
API = "monitoring.coreos.com/v1"
