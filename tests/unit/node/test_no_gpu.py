"""On a node where NVML lists no GPU the agent waits, healthy and idle, instead of exiting
(which would crash-loop the DaemonSet pod and fire VgpuBridgeAgentDown), and starts once a GPU
appears."""

from __future__ import annotations

import json
import threading
import urllib.request

from tests.integration.webhook_harness import free_port
from vgpu_bridge.node.gpus import Gpu, GpuDiscoveryError
from vgpu_bridge.node.metrics import MetricsServer
from vgpu_bridge.node.no_gpu import wait_for_gpus, why_no_gpus

GPU = Gpu(index=0, uuid="GPU-a", product_name="NVIDIA L4", memory=24 << 30)


def get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return response.status, response.read().decode()


def test_no_driver_and_no_card_are_both_reasons_to_wait() -> None:
    def unavailable() -> tuple[Gpu, ...]:
        raise GpuDiscoveryError("NVML is unavailable: libnvidia-ml.so.1 not found")

    assert why_no_gpus(unavailable) == ((), "NVML is unavailable: libnvidia-ml.so.1 not found")
    assert why_no_gpus(tuple) == ((), "NVML lists no GPU on this node")
    assert why_no_gpus(lambda: (GPU,)) == ((GPU,), None)


def test_gpus_listed_at_once_are_returned_without_serving_anything() -> None:
    port = free_port()
    found = wait_for_gpus(lambda: (GPU,), stop=threading.Event(), recheck_s=3600,
                          host_port=("127.0.0.1", port))  # fmt: skip
    assert found == (GPU,)
    MetricsServer(("127.0.0.1", port)).server_close()  # nothing was listening there


def test_while_waiting_healthz_is_ok_and_says_why_then_the_gpus_found_later_are_returned() -> None:
    port = free_port()
    seen: list[tuple[int, str]] = []
    calls = 0

    def find() -> tuple[Gpu, ...]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise GpuDiscoveryError("NVML is unavailable: no driver")
        seen.extend([get(port, "/healthz"), get(port, "/metrics")])  # served between looks
        return (GPU,) if calls == 3 else ()

    found = wait_for_gpus(find, stop=threading.Event(), recheck_s=0.01,
                          host_port=("127.0.0.1", port))  # fmt: skip
    assert found == (GPU,)
    (status, body), (metrics_status, metrics), *_ = seen
    assert status == 200
    assert json.loads(body) == {"status": "ok", "waiting": "NVML is unavailable: no driver"}
    assert metrics_status == 200
    assert "vgpu_bridge_agent_waiting_for_gpus 1.0" in metrics
    assert "vgpu_bridge_agent_healthy 1.0" in metrics
    assert json.loads(seen[2][1])["waiting"] == "NVML lists no GPU on this node"
    MetricsServer(("127.0.0.1", port)).server_close()  # the agent itself can serve there next


def test_stopping_while_waiting_returns_none() -> None:
    stop = threading.Event()

    def find() -> tuple[Gpu, ...]:
        stop.set()  # SIGTERM arrives while it waits
        return ()

    assert wait_for_gpus(find, stop=stop, recheck_s=3600, host_port=None) is None
