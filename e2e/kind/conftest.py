"""Fixtures of the kind-path checks: helm, as the chart tests build it."""

from __future__ import annotations

import pytest

from e2e.chart.helmbin import ensure_helm
from e2e.chart.rendering import Helm
from e2e.cluster import Settings


@pytest.fixture(scope="session")
def helm(e2e_settings: Settings) -> Helm:
    return Helm(ensure_helm(e2e_settings).binary)
