"""Fixtures of the Prometheus tests: the cached prometheus and promtool (fetched on first use,
as `make e2e` does before the tests)."""

from __future__ import annotations

import pytest

from e2e.cluster.settings import Settings
from e2e.prometheus.install import PrometheusTools, ensure_prometheus


@pytest.fixture(scope="session")
def prometheus_tools() -> PrometheusTools:
    return ensure_prometheus(Settings.from_env())
