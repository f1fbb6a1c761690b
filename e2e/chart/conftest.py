"""Fixtures of the chart tests: helm built from its Go module (``make helm-bin`` does it ahead of
time; a test session builds it when it is missing), and the API's discovery on the local cluster."""

from __future__ import annotations

import pytest

from e2e.chart.cluster_api import Discovery
from e2e.chart.helmbin import ensure_helm
from e2e.chart.rendering import Helm
from e2e.cluster import KubeClient, Settings


@pytest.fixture(scope="session")
def helm(e2e_settings: Settings) -> Helm:
    return Helm(ensure_helm(e2e_settings).binary)


@pytest.fixture(scope="session")
def discovery(kube: KubeClient) -> Discovery:
    return Discovery(kube)
