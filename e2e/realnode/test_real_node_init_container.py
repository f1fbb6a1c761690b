"""An init container and its app share one claim on a real node, each held to its own limit
(issue 16, item 4: init containers book the peak, not the sum).

A pod's init container asks `nvidia.com/gpumem: 1000`, its app container 2000. Our webhook gives
both one claim booked for the peak (2000, not 3000) and the init container, below the claim's
share, `VGPU_CONTAINER_MEMORY_LIMIT_0=1000m` in its env. The real kubelet prepares the claim once;
containerd applies the agent's CDI spec (`CUDA_DEVICE_MEMORY_LIMIT_0=2000m`) to both containers;
inside each, `cudaprobe` over the fake libcuda.so.1 with libvgpu preloaded sees its own limit as
the card's total and is refused (CUDA_ERROR_OUT_OF_MEMORY) past it: the init container at 1000
MiB (libvgpu lowers to VGPU_CONTAINER_*), then the app at 2000.

Collected only with ``VGPU_REALNODE=1`` (``make e2e-realnode``); see conftest.py.
"""

from __future__ import annotations

import pytest

from e2e.cluster.client import Json
from e2e.dra_objects import quantity
from e2e.realnode.node import CUDA_IMAGE
from e2e.realnode.product import RESOURCE, Product, delete_and_unprepare, parse
from e2e.realnode.spike import node_pod, pod_log
from e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

CHUNK_MIB = 50
HOLD_S = 600  # the app holds its allocation until deleted
CUDA_ERROR_OUT_OF_MEMORY = 2
INIT_MIB, APP_MIB = 1000, 2000


def init_and_app_pod(node_name: str) -> Json:
    """`init` (gpumem 1000, exits once refused) before `app` (gpumem 2000, holds its memory)."""
    app = {
        "name": "app",
        "image": CUDA_IMAGE,
        "args": [str(CHUNK_MIB), str(HOLD_S)],
        "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": APP_MIB}},
    }
    pod = node_pod("init-and-app", node_name, app)
    pod["spec"]["initContainers"] = [
        {
            "name": "init",
            "image": CUDA_IMAGE,
            "imagePullPolicy": "Never",
            "args": [str(CHUNK_MIB), "0"],
            "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": INIT_MIB}},
        }
    ]
    return pod


def env_of(container: Json) -> dict[str, str]:
    return {var["name"]: var.get("value", "") for var in container.get("env") or ()}


def assert_held_to(output: str, mib: int) -> None:
    """libvgpu in the container showed `mib` as the card's total and refused past it."""
    values = parse(output)
    assert values["env.CUDA_DEVICE_MEMORY_LIMIT_0"] == [f"{APP_MIB}m"], output  # the claim's
    assert values["init_error"] == ["0"], output
    assert values["total_mib"] == [str(mib)], output
    assert values["alloc_error"] == [str(CUDA_ERROR_OUT_OF_MEMORY)], output
    assert mib - CHUNK_MIB < int(values["allocated_mib"][0]) <= mib, output


def test_init_container_and_app_share_one_claim_each_held_to_its_own_limit(
    product: Product,
) -> None:
    client, node, ns = product.client, product.node, product.namespace
    created = client.create(f"/api/v1/namespaces/{ns}/pods", init_and_app_pod(node.name))
    spec = created["spec"]
    [claim_entry] = spec["resourceClaims"]
    [init], [app] = spec["initContainers"], spec["containers"]
    assert (
        init["resources"]["claims"] == app["resources"]["claims"] == [{"name": claim_entry["name"]}]
    )
    assert env_of(init)["VGPU_CONTAINER_MEMORY_LIMIT_0"] == f"{INIT_MIB}m"
    assert not any(name.startswith("VGPU_CONTAINER_") for name in env_of(app))

    def outputs() -> tuple[str, str] | None:
        """Both containers' output once the app holds its share (the init one has ended)."""
        pod = client.get(f"/api/v1/namespaces/{ns}/pods/init-and-app")
        assert pod["status"].get("phase") in ("Pending", "Running"), pod["status"]
        app_output = pod_log(node, pod, "app")
        if pod["status"].get("phase") != "Running" or "alloc_error=" not in app_output:
            return None
        return pod_log(node, pod, "init"), app_output

    init_output, app_output = wait_for(outputs, timeout_s=180, what="the app holding its share")
    assert_held_to(init_output, INIT_MIB)
    assert_held_to(app_output, APP_MIB)

    [claim] = client.items(f"{RESOURCE}/namespaces/{ns}/resourceclaims")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert quantity(result["consumedCapacity"]["memory"]) == quantity(f"{APP_MIB}Mi")  # the peak
    delete_and_unprepare(product, ["init-and-app"])
