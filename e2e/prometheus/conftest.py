"""Fixtures of the Prometheus tests: the cached prometheus and promtool (fetched on first use,
as `make e2e` does before the tests), and helm for the chart's monitoring objects."""

from __future__ import annotations

import pytest

from e2e.chart.helmbin import ensure_helm
from e2e.chart.rendering import Helm
from e2e.cluster.settings import Settings
from e2e.prometheus.install import PrometheusTools, ensure_prometheus


@pytest.fixture(scope="session")
def prometheus_tools() -> PrometheusTools:
    return ensure_prometheus(Settings.from_env())


@pytest.fixture(scope="session")
def helm(e2e_settings: Settings) -> Helm:
    """helm built from its Go module (`make helm-bin`), as the chart tests use it."""
    return Helm(ensure_helm(e2e_settings).binary)
