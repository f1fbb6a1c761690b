"""Task priority through real containers on the real node (HAMi's ``nvidia.com/priority``).

Two pods ask for a share of the one mock GPU; one also asks ``nvidia.com/priority: "0"`` (high),
the other nothing (low, libvgpu's default 1) and runs as another user (nobody). Our webhook
translates both, kube-scheduler allocates both claims on the GPU, the real kubelet has our agent
prepare them, and containerd applies the CDI specs, which mount the node's priority dir
(``<vgpu_dir>/priority``, 01777) read-write and set ``CUDA_TASK_PRIORITY=0`` in the high pod only.
Inside each, ``cudalaunch`` launches kernels on the fake driver (2 ms of simulated busy time
each) and prints its launch count every 100 ms on CLOCK_BOOTTIME, one clock for both containers.
The low pod launches first; while the high pod launches (``HIGH_LAUNCH_S``) the low one's
launches wait on the GPU's board; once the high pod has launched nothing for HOLD (200 ms) the low
one goes on. Each pod has its own fake device, so only the board can hold the low one back.

Collected only with ``VGPU_REALNODE=1`` (``make e2e-realnode``); see conftest.py.
"""

from __future__ import annotations

import json
import stat
import struct
from dataclasses import dataclass

import pytest

from e2e.cluster.client import Json, KubeClient
from e2e.realnode.agent import vgpu_dir
from e2e.realnode.node import CUDA_IMAGE, RealNode
from e2e.realnode.product import RESOURCE, Product, delete_and_unprepare, parse
from e2e.realnode.spike import node_pod, pod_log
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT

pytestmark = pytest.mark.e2e

KERNEL_US = 2000
HIGH_LAUNCH_S = 6
#: both pods live until deleted; the low one launches all along
LIVE_S = 600
NOBODY = 65534
CONTAINER_PRIORITY_DIR = "/usr/local/vgpu/priority"
#: the low pod launches at least this many kernels before the high pod is created
LOW_WARMUP = 100
#: seconds after the high pod's first launch before the low pod must be held (its first stamp)
SETTLE_MS = 500
#: the low pod resumes within this long after the high pod's last launch (HOLD is 200 ms)
RESUME_WITHIN_MS = 5000
#: and launches at least ``AFTER_LAUNCHES`` in the ``AFTER_MS`` after it resumed (about 1000)
AFTER_MS = 2000
AFTER_LAUNCHES = 200


def launch_pod(name: str, node_name: str, *, launch_s: int, priority: str | None) -> Json:
    limits: Json = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}
    security: Json = {}
    if priority is None:
        security = {"runAsUser": NOBODY, "runAsGroup": NOBODY}
    else:
        limits["nvidia.com/priority"] = priority
    container = {
        "name": "cuda",
        "image": CUDA_IMAGE,
        "command": ["/cudalaunch"],
        "args": [str(launch_s), str(LIVE_S)],
        "env": [{"name": "FAKE_CUDA_KERNEL_US", "value": str(KERNEL_US)}],
        "resources": {"limits": limits},
    }
    return node_pod(name, node_name, container, security=security)


@dataclass(frozen=True)
class Launches:
    """One cudalaunch's output: its key=value lines and its (CLOCK_BOOTTIME ms, count) ticks."""

    values: dict[str, list[str]]
    ticks: list[tuple[int, int]]

    @classmethod
    def of(cls, output: str) -> Launches:
        values = parse(output)
        pairs = (tick.split() for tick in values.get("tick", []))
        return cls(values, [(int(t), int(n)) for t, n in pairs])

    def count_at(self, ms: int) -> int:
        """Launches done by the last tick at or before ``ms``."""
        return max((n for t, n in self.ticks if t <= ms), default=0)

    def first_tick_above(self, count: int, *, after_ms: int) -> int | None:
        return next((t for t, n in self.ticks if t > after_ms and n > count), None)

    def stopped(self) -> tuple[int, int] | None:
        """(ms, launches in all) once the launch loop has ended."""
        found = self.values.get("stopped_ms")
        if not found:
            return None
        ms, count = found[0].split()
        return int(ms), int(count)


def test_a_priority_0_pod_holds_back_a_low_pods_launches_on_the_same_gpu_until_it_stops(
    product: Product,
) -> None:
    client, node, ns = product.client, product.node, product.namespace
    pods = f"/api/v1/namespaces/{ns}/pods"
    low = client.create(pods, launch_pod("low", node.name, launch_s=LIVE_S, priority=None))
    _assert_translated(low)
    wait_for(
        lambda: _launched(client, node, ns, "low") >= LOW_WARMUP,
        timeout_s=180,
        what=f"the low pod launching ({LOW_WARMUP} kernels)",
    )
    high = client.create(pods, launch_pod("high", node.name, launch_s=HIGH_LAUNCH_S, priority="0"))
    _assert_translated(high)

    def both_done() -> tuple[Launches, Launches] | None:
        """Both outputs once the high pod has stopped and the low one has run ``AFTER_MS`` past
        its resumption (or past the latest it may resume)."""
        high_run = Launches.of(_log(client, node, ns, "high"))
        low_run = Launches.of(_log(client, node, ns, "low"))
        stopped = high_run.stopped()
        if stopped is None or not low_run.ticks:
            return None
        held = low_run.count_at(stopped[0])
        resumed = low_run.first_tick_above(held, after_ms=stopped[0])
        latest = stopped[0] + RESUME_WITHIN_MS if resumed is None else resumed
        return (high_run, low_run) if low_run.ticks[-1][0] >= latest + AFTER_MS else None

    high_run, low_run = wait_for(
        both_done, timeout_s=180, what="the high pod launching and stopping, the low one resuming"
    )
    print("high:", {k: v for k, v in high_run.values.items() if k != "tick"})
    print("low:", {k: v for k, v in low_run.values.items() if k != "tick"})
    for run in (high_run, low_run):
        assert run.values["init_error"] == ["0"], run.values
        assert "launch_error" not in run.values, run.values
        assert run.values["env.CUDA_TASK_PRIORITY_DIR"] == [CONTAINER_PRIORITY_DIR]
    assert high_run.values["env.CUDA_TASK_PRIORITY"] == ["0"]
    assert "env.CUDA_TASK_PRIORITY" not in low_run.values  # libvgpu's default: 1 (low)

    high_start = int(high_run.values["start_ms"][0])
    stopped = high_run.stopped()
    assert stopped is not None
    high_stop, high_launches = stopped
    before = low_run.count_at(high_start)
    held_from = low_run.count_at(high_start + SETTLE_MS)
    held_to = low_run.count_at(high_stop)
    resumed_at = low_run.first_tick_above(held_to, after_ms=high_stop)
    resumed_for = low_run.count_at((resumed_at or high_stop) + AFTER_MS) - held_to
    print(
        f"high: {high_launches} launches in {high_stop - high_start} ms; low: {before} before "
        f"it, {held_from - before} in its first {SETTLE_MS} ms, {held_to - held_from} in the "
        f"rest of its launch window, resumed "
        f"{None if resumed_at is None else resumed_at - high_stop} ms after its last launch, "
        f"{resumed_for} in the {AFTER_MS} ms after that"
    )
    assert high_launches >= 500, high_launches  # 2 ms kernels for 6 s: about 3000
    assert before >= LOW_WARMUP
    # while the high pod launched, the low one made (almost) no progress: a few launches at most
    # where the 2-core machine left the high pod's loop off the CPU for longer than HOLD
    assert held_to - held_from <= max(5, high_launches // 20), low_run.ticks
    # once it stopped, the low pod went on, promptly and at its full rate
    assert resumed_at is not None, low_run.ticks
    assert resumed_at - high_stop <= RESUME_WITHIN_MS, (resumed_at, high_stop)
    assert resumed_for >= AFTER_LAUNCHES, low_run.ticks

    # the board: one per GPU UUID in the node's priority dir, stamped by the high pod's container
    (uuid,) = set(high_run.values["uuid"] + low_run.values["uuid"])
    priority_dir = vgpu_dir(node.layout) / "priority"
    assert stat.S_IMODE(priority_dir.stat().st_mode) == 0o1777
    assert sorted(p.name for p in priority_dir.iterdir()) == [f"{uuid}.board"]
    board = priority_dir / f"{uuid}.board"
    # the low pod (nobody) made it first; the high pod (root) stamps it all the same
    assert (board.stat().st_uid, stat.S_IMODE(board.stat().st_mode)) == (NOBODY, 0o666)
    (high_ns,) = struct.unpack_from("<Q", board.read_bytes(), 64)
    assert high_start <= high_ns // 1_000_000 <= high_stop, (high_ns, high_start, high_stop)

    # the CDI specs: both mount the priority dir read-write; only the high claim says priority 0
    specs = _specs_by_pod(client, node, ns, ("high", "low"))
    for spec in specs.values():
        edits = spec["containerEdits"]
        mounts = [m for m in edits["mounts"] if m["containerPath"] == CONTAINER_PRIORITY_DIR]
        assert mounts == [
            {
                "hostPath": str(priority_dir),
                "containerPath": CONTAINER_PRIORITY_DIR,
                "options": ["rw", "nosuid", "nodev", "bind"],
            }
        ]
        assert f"CUDA_TASK_PRIORITY_DIR={CONTAINER_PRIORITY_DIR}" in edits["env"]
    assert "CUDA_TASK_PRIORITY=0" in specs["high"]["containerEdits"]["env"]
    assert not [e for e in specs["low"]["containerEdits"]["env"] if "TASK_PRIORITY=" in e]

    delete_and_unprepare(product, ("high", "low"))
    assert board.is_file()  # the node's priority dir and its boards outlive the claims


def _assert_translated(pod: Json) -> None:
    """Our webhook gave the pod a claim instead of the extended resources."""
    limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
    assert not any(key.startswith("nvidia.com/") for key in limits), limits
    assert pod["spec"].get("resourceClaims"), pod["spec"]


def _log(client: KubeClient, node: RealNode, namespace: str, name: str) -> str:
    return pod_log(node, client.get(f"/api/v1/namespaces/{namespace}/pods/{name}"), "cuda")


def _launched(client: KubeClient, node: RealNode, namespace: str, name: str) -> int:
    pod = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    assert pod["status"].get("phase") in ("Pending", "Running"), pod["status"]
    output = pod_log(node, pod, "cuda")
    assert "init_error=" not in output or "init_error=0" in output, output
    ticks = Launches.of(output).ticks
    return ticks[-1][1] if ticks else 0


def _specs_by_pod(
    client: KubeClient, node: RealNode, namespace: str, names: tuple[str, ...]
) -> dict[str, Json]:
    """Each pod's claim's CDI spec, found by the claim name our agent annotates it with."""
    specs: dict[str, Json] = {}
    for name in names:
        pod = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        (status,) = pod["status"]["resourceClaimStatuses"]
        claim = client.get(
            f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{status['resourceClaimName']}"
        )
        path = node.layout.cdi_dir / f"k8s.{DEFAULT.driver}-claim_{claim['metadata']['uid']}.json"
        specs[name] = json.loads(path.read_text())
        annotation = specs[name]["annotations"][f"{DEFAULT.driver}/claim"]
        assert annotation == f"{namespace}/{status['resourceClaimName']}"
    return specs
