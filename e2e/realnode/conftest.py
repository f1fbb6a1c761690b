"""Fixtures of the real-node tier (issue 10).

The tier starts a real kubelet, containerd and runc as root and changes kernel tunables while it
runs, so its e2e tests are collected only when ``VGPU_REALNODE=1`` (``make e2e-realnode`` sets it);
``make e2e`` collects only the fast tests of the package's own code (images, configs, teardown
helpers). Module fixtures: ``real_node`` (a private control plane + the real node, torn down at the
end; the teardown fails the session if it leaves a process, mount or cgroup behind) and
``product`` (the same with libvgpu, our agent and our webhook: e2e/realnode/product.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from e2e.cluster import LocalCluster, Settings
from e2e.realnode.node import RealNode
from e2e.realnode.product import Product, running_product
from e2e.realnode.spike import node_and_cluster

ENABLED = os.environ.get("VGPU_REALNODE") == "1"
#: the tests that need root and a real node; not even collected unless enabled
collect_ignore_glob = [] if ENABLED else ["test_real_node*.py"]


@pytest.fixture(scope="module")
def real_node(e2e_settings: Settings) -> Iterator[tuple[LocalCluster, RealNode]]:
    log: list[str] = []
    try:
        with node_and_cluster(e2e_settings, log=log) as started:
            yield started
    finally:
        print("\n".join(log))


@pytest.fixture(scope="module")
def product(e2e_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Product]:
    log: list[str] = []
    try:
        with running_product(e2e_settings, tmp_path_factory.mktemp("webhook"), log=log) as started:
            yield started
    finally:
        print("\n".join(log))
