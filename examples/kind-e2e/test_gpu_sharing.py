"""GPU sharing in a kind cluster's e2e suite, with vgpu-bridge's mock cards (docs/kind-e2e.md).

Copy this file and ``cuda_share_probe.py`` into your repository. It needs Python 3.10+, pytest
and kubectl (nothing else is imported), and a cluster where ``hack/kind-e2e.sh all`` has run.
Environment:

    KUBECONFIG / KUBECTL  the cluster, and the kubectl to call (default: kubectl)
    SCHEDULER             default-scheduler or volcano (the pods' schedulerName)
    PYTHON_IMAGE          any glibc image with python3 (default python:3.12-slim); it needs no
                          CUDA: the claim brings the stand-in driver, libvgpu enforces the share
    NAMESPACE             where the test pods run (default gpu-sharing-e2e; made and deleted)
    VGPU_BRIDGE_NAMESPACE the chart's release namespace (default vgpu-bridge)
    SHARE_MIB             the share pod's memory (default 4096)

A pod asks for a share the HAMi way (``nvidia.com/gpu: 1``, ``nvidia.com/gpumem: <MiB>``); its
container runs ``cuda_share_probe.py`` (ctypes over libcuda.so.1 and libnvidia-ml.so.1) and
holds half its share. The tests assert what a real card under vgpu-bridge would show: the
share's size is the card's memory to the process, an allocation within it succeeds, one past it
is refused with CUDA_ERROR_OUT_OF_MEMORY, the node agent's metrics show what the pod holds, and a
second pod asking more than the card has left stays Pending until the first is gone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

KUBECTL = os.environ.get("KUBECTL", "kubectl")
SCHEDULER = os.environ.get("SCHEDULER", "default-scheduler")
PYTHON_IMAGE = os.environ.get("PYTHON_IMAGE", "python:3.12-slim")
NAMESPACE = os.environ.get("NAMESPACE", "gpu-sharing-e2e")
CHART_NAMESPACE = os.environ.get("VGPU_BRIDGE_NAMESPACE", "vgpu-bridge")
SHARE_MIB = int(os.environ.get("SHARE_MIB", "4096"))
DRIVER = os.environ.get("VGPU_BRIDGE_DRIVER", "gpu.vgpu-bridge.io")
METRICS_PORT = 9401  # the chart's agent.metricsPort
PROBE = Path(__file__).with_name("cuda_share_probe.py")
MiB = 2**20
PAST_BYTES = 64 * MiB  # what the probe asks for beyond what is free
CUDA_SUCCESS, CUDA_ERROR_OUT_OF_MEMORY = 0, 2
Json = dict[str, Any]
T = TypeVar("T")


def kubectl(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [KUBECTL, *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def get(*args: str) -> Json:
    found: Json = json.loads(kubectl("get", "--output=json", *args))
    return found


def wait_for(check: Callable[[], T | None], what: str, timeout_s: float = 180) -> T:
    """``check()`` until it returns something other than None (or False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(1)


def share_pod(name: str, gpumem_mib: int, *, annotations: dict[str, str] | None = None) -> Json:
    """A pod asking for ``gpumem_mib`` of one card, running the probe from the ConfigMap."""
    command = ["python3", "/probe/cuda_share_probe.py", str(PAST_BYTES), "--hold", "3600"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "schedulerName": SCHEDULER,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "probe",
                    "image": PYTHON_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": gpumem_mib}},
                    "volumeMounts": [{"name": "probe", "mountPath": "/probe"}],
                }
            ],
            "volumes": [{"name": "probe", "configMap": {"name": "cuda-share-probe"}}],
        },
    }


def apply(manifest: Json) -> None:
    kubectl("apply", f"--namespace={NAMESPACE}", "--filename=-", stdin=json.dumps(manifest))


def pod(name: str) -> Json:
    return get(f"--namespace={NAMESPACE}", "pod", name)


def probe_report(name: str) -> Json:
    """The probe's JSON line, once the container has printed it."""

    def printed() -> Json | None:
        phase = pod(name)["status"].get("phase")
        if phase not in ("Running", "Succeeded", "Failed"):
            return None
        lines = kubectl(f"--namespace={NAMESPACE}", "logs", name).splitlines()
        report: Json | None = next((json.loads(x) for x in lines if x.startswith("{")), None)
        return report

    return wait_for(printed, f"pod {name}'s probe report")


@pytest.fixture(scope="module")
def namespace() -> Iterator[str]:
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=180s")
    kubectl("create", "namespace", NAMESPACE)
    kubectl(f"--namespace={NAMESPACE}", "create", "configmap", "cuda-share-probe",
            f"--from-file={PROBE}")  # fmt: skip
    yield NAMESPACE
    if os.environ.get("KEEP_NAMESPACE") != "1":  # the pods go first: their claims unprepared
        kubectl("delete", "namespace", NAMESPACE, "--wait=true", "--timeout=180s")


@pytest.fixture(scope="module")
def share(namespace: str) -> Json:
    """The share pod, running and holding half its share; its probe's report."""
    apply(share_pod("share", SHARE_MIB))
    report = probe_report("share")
    assert report["error"] is None, report
    return report


def test_the_share_pod_is_placed_by_the_chosen_scheduler(share: Json) -> None:
    found = pod("share")
    assert found["spec"]["schedulerName"] == SCHEDULER
    assert found["spec"].get("nodeName")
    claims = found["status"].get("resourceClaimStatuses") or []
    assert len(claims) == 1, "the webhook turned nvidia.com/gpu into one DRA claim"


def test_the_process_sees_its_share_as_the_whole_card(share: Json) -> None:
    assert share["cuInit"] == CUDA_SUCCESS
    assert share["total"] == SHARE_MIB * MiB  # cuMemGetInfo
    assert share["nvml"]["total"] == SHARE_MIB * MiB  # nvmlDeviceGetMemoryInfo
    assert share["nvml"]["uuid"].startswith("GPU-")


def test_an_allocation_within_the_share_succeeds(share: Json) -> None:
    assert share["within"]["result"] == CUDA_SUCCESS
    assert share["free_after"] <= share["free"] - share["within"]["bytes"]


def test_an_allocation_past_the_share_is_refused_out_of_memory(share: Json) -> None:
    assert share["past"]["bytes"] > share["free_after"]
    assert share["past"]["result"] == CUDA_ERROR_OUT_OF_MEMORY


def agent_metrics(node: str) -> str:
    """The node agent's /metrics, through the API server's pod proxy."""
    agents = get(f"--namespace={CHART_NAMESPACE}", "pods",
                 "--selector=app.kubernetes.io/component=agent",
                 f"--field-selector=spec.nodeName={node}")["items"]  # fmt: skip
    assert len(agents) == 1, f"one agent on {node}"
    name = agents[0]["metadata"]["name"]
    proxy = f"/api/v1/namespaces/{CHART_NAMESPACE}/pods/{name}:{METRICS_PORT}/proxy/metrics"
    return kubectl("get", "--raw", proxy)


def sample(metrics: str, metric: str, claim: str) -> float | None:
    for line in metrics.splitlines():
        if line.startswith(metric + "{") and f'claim="{claim}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_agents_metrics_show_what_the_pod_holds(share: Json) -> None:
    found = pod("share")
    (status,) = found["status"]["resourceClaimStatuses"]
    claim, node = status["resourceClaimName"], found["spec"]["nodeName"]

    def used() -> float | None:
        value = sample(agent_metrics(node), "vgpu_bridge_claim_memory_used_bytes", claim)
        return value if value else None

    held = wait_for(used, f"vgpu_bridge_claim_memory_used_bytes of claim {claim}", timeout_s=90)
    assert share["within"]["bytes"] <= held <= SHARE_MIB * MiB
    limit = sample(agent_metrics(node), "vgpu_bridge_claim_memory_limit_bytes", claim)
    assert limit == SHARE_MIB * MiB


def kubectl_vgpu_installed() -> bool:
    """Whether ``kubectl vgpu`` (vgpu-bridge's kubectl plugin) is on PATH; KUBECTL_VGPU=required
    makes its absence a failure instead of a skip."""
    done = subprocess.run([KUBECTL, "vgpu", "status", "--help"], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    if done.returncode != 0 and os.environ.get("KUBECTL_VGPU") == "required":
        raise AssertionError(f"kubectl vgpu is not installed: {done.stderr.strip()}")
    return done.returncode == 0


def test_kubectl_vgpu_status_shows_what_the_pod_holds(share: Json) -> None:
    if not kubectl_vgpu_installed():
        pytest.skip("kubectl vgpu not installed (krew install vgpu, or KUBECTL_VGPU=required)")

    def used() -> int | None:
        status = json.loads(kubectl("vgpu", "status", f"--namespace={NAMESPACE}", "-o", "json"))
        shares = [s for card in status["cards"] for s in card["shares"] if s["pod"] == "share"]
        assert len(shares) == 1, status
        value: int | None = shares[0].get("usedMemory")
        return value if value else None

    held = wait_for(used, "kubectl vgpu status showing the share's used memory", timeout_s=90)
    assert share["within"]["bytes"] <= held <= SHARE_MIB * MiB


def card_memory_mib(uuid: str) -> int:
    """The card's memory, as its node agent published it in the ResourceSlices."""
    for item in get("resourceslices", f"--field-selector=spec.driver={DRIVER}")["items"]:
        for device in item["spec"].get("devices") or []:
            if device.get("attributes", {}).get("uuid", {}).get("string") == uuid:
                return quantity_mib(device["capacity"]["memory"]["value"])
    raise AssertionError(f"no published device has uuid {uuid}")


SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}  # fmt: skip


def quantity_mib(quantity: str) -> int:
    """A whole-number Kubernetes quantity (``80Gi``, ``81559Mi``, ``85899345920``) in MiB."""
    match = re.fullmatch(r"(\d+)(|k|M|G|T|Ki|Mi|Gi|Ti)", quantity)
    assert match, f"memory capacity {quantity!r}"
    return int(match[1]) * SUFFIXES[match[2]] // MiB


def unschedulable_reason(name: str) -> str | None:
    """Why the scheduler left the pod unplaced (its PodScheduled condition or event)."""
    found = pod(name)
    assert not found["spec"].get("nodeName"), f"{name} was placed on {found['spec']['nodeName']}"
    for condition in found["status"].get("conditions") or []:
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return f"{condition.get('reason')}: {condition.get('message')}"
    failed = f"--field-selector=involvedObject.name={name},reason=FailedScheduling"
    events = get(f"--namespace={NAMESPACE}", "events", failed)
    return next((e["message"] for e in events["items"]), None)


def test_a_second_pod_beyond_the_cards_free_memory_stays_pending(share: Json) -> None:
    """Pinned to the share's card (HAMi's use-gpuuuid), asking 1 MiB more than the card has
    left: Pending with the scheduler's reason; it runs once the first share is deleted."""
    uuid = share["nvml"]["uuid"]
    beyond = card_memory_mib(uuid) - SHARE_MIB + 1
    apply(share_pod("beyond", beyond, annotations={"nvidia.com/use-gpuuuid": uuid}))
    reason = wait_for(lambda: unschedulable_reason("beyond"), "beyond's unschedulable reason")
    time.sleep(10)  # and it stays so
    assert pod("beyond")["status"]["phase"] == "Pending", reason
    assert not pod("beyond")["spec"].get("nodeName")
    kubectl(f"--namespace={NAMESPACE}", "delete", "pod", "share", "--wait=true")
    report = probe_report("beyond")
    assert report["nvml"]["uuid"] == uuid
    assert report["total"] == beyond * MiB
