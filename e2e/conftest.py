"""Fixtures of the e2e tier.

Session: ``e2e_cluster`` (a private control plane, stopped and removed at the end), ``kube`` (admin
client), ``fake_nodes`` (two Ready node names), ``kubelet_standin`` (plays the kubelet for pods on
those nodes; assign ``kubelet_standin.preparer`` to plug in a ``NodePreparer``; it is reset to
``MarkRunningOnly`` after each test). Per test: ``namespace`` (created, dumped on failure, deleted),
``fake_gpu_driver`` (a DeviceClass and slices of shareable 40Gi GPUs: gpu-0 and gpu-1 on the first
fake node, gpu-0 on the second; removed after the test).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Generator, Iterator

import pytest

from e2e.cluster import (
    KubeClient,
    KubeletStandIn,
    LocalCluster,
    MarkRunningOnly,
    Settings,
    create_fake_nodes,
    running_cluster,
)
from e2e.cluster.diagnostics import dump
from e2e.fake_driver import FakeGpuDriver, install_fake_gpu_driver, remove_fake_gpu_driver

FAKE_NODE_COUNT = 2
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


@pytest.fixture(scope="session")
def e2e_settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def e2e_cluster(e2e_settings: Settings) -> Iterator[LocalCluster]:
    with running_cluster(e2e_settings) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kube(e2e_cluster: LocalCluster) -> KubeClient:
    return e2e_cluster.client()


@pytest.fixture(scope="session")
def fake_nodes(kube: KubeClient) -> list[str]:
    return create_fake_nodes(kube, FAKE_NODE_COUNT)


@pytest.fixture(scope="session")
def _kubelet_standin_session(kube: KubeClient, fake_nodes: list[str]) -> Iterator[KubeletStandIn]:
    with KubeletStandIn(kube, fake_nodes) as standin:
        yield standin


@pytest.fixture
def kubelet_standin(_kubelet_standin_session: KubeletStandIn) -> Iterator[KubeletStandIn]:
    yield _kubelet_standin_session
    _kubelet_standin_session.preparer = MarkRunningOnly()


@pytest.fixture
def namespace(
    request: pytest.FixtureRequest,
    e2e_cluster: LocalCluster,
    e2e_settings: Settings,
    kube: KubeClient,
) -> Iterator[str]:
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base}-{secrets.token_hex(3)}"
    kube.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    reports = request.node.stash.get(_REPORTS, {})
    if any(report.failed for report in reports.values()):
        print(dump(e2e_cluster, name, e2e_settings.artifacts_dir / name))
    for pod in kube.items(f"/api/v1/namespaces/{name}/pods"):
        kube.delete(f"/api/v1/namespaces/{name}/pods/{pod['metadata']['name']}", grace_period_s=0)
    kube.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def fake_gpu_driver(kube: KubeClient, fake_nodes: list[str]) -> Iterator[FakeGpuDriver]:
    devices = {fake_nodes[0]: ["gpu-0", "gpu-1"], fake_nodes[1]: ["gpu-0"]}
    driver = install_fake_gpu_driver(kube, devices)
    yield driver
    remove_fake_gpu_driver(kube, driver)
