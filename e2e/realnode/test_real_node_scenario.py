"""The scenario that proves the product on a real node (issue 10, items 2 and 3).

Pods ask for ``nvidia.com/gpumem``; our webhook translates them into ResourceClaimTemplates;
kube-scheduler allocates both claims on the one mock GPU our node agent publishes for the real
node; the real kubelet calls the agent's NodePrepareResources (registered through its plugin
registry); containerd applies the agent's CDI spec; inside each container a dynamic program over
the fake libcuda.so.1 runs with libvgpu.so preloaded through /etc/ld.so.preload and is refused
(CUDA_ERROR_OUT_OF_MEMORY) past its own share, while the other pod holds its own. Deleting the
pods unprepares the claims and removes the CDI specs.

Collected only with ``VGPU_REALNODE=1`` (``make e2e-realnode``); see conftest.py.
"""

from __future__ import annotations

import urllib.request
from functools import partial
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.cluster.client import Json
from e2e.realnode.agent import CONTAINER_LIBVGPU, vgpu_dir
from e2e.realnode.node import CUDA_IMAGE
from e2e.realnode.product import GPU, RESOURCE, Product, delete_and_unprepare, parse
from e2e.realnode.spike import node_pod, pod_log
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.cdi import LIMITS_MOUNT
from vgpu_bridge.node.pod_resources import PodResources

pytestmark = pytest.mark.e2e

CHUNK_MIB = 50
#: the pods hold their allocations until deleted
HOLD_S = 600
CUDA_ERROR_OUT_OF_MEMORY = 2


def cuda_pod(name: str, node_name: str, gpumem_mib: int) -> Json:
    container = {
        "name": "cuda",
        "image": CUDA_IMAGE,
        "args": [str(CHUNK_MIB), str(HOLD_S)],
        "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": gpumem_mib}},
    }
    return node_pod(name, node_name, container)


def test_gpumem_pods_share_a_real_node_gpu_each_within_its_own_share(product: Product) -> None:
    client, node, ns = product.client, product.node, product.namespace
    shares = {"small": 1000, "large": 2000}
    for name, mib in shares.items():
        created = client.create(f"/api/v1/namespaces/{ns}/pods", cuda_pod(name, node.name, mib))
        # translated by our webhook: a claim instead of the extended resources
        limits = created["spec"]["containers"][0].get("resources", {}).get("limits", {})
        assert not any(key.startswith("nvidia.com/") for key in limits), limits
        assert created["spec"].get("resourceClaims"), created["spec"]

    def outputs() -> dict[str, str] | None:
        """Each pod's output once both have hit their limit and hold it (both Running)."""
        found = {}
        for name in shares:
            pod = client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            assert pod["status"].get("phase") in ("Pending", "Running"), pod["status"]
            output = pod_log(node, pod, "cuda")
            if pod["status"].get("phase") != "Running" or "alloc_error=" not in output:
                return None
            found[name] = output
        return found

    held = wait_for(outputs, timeout_s=180, what="both CUDA pods holding their shares")
    for name, mib in shares.items():
        values = parse(held[name])
        assert values["env.CUDA_DEVICE_MEMORY_LIMIT_0"] == [f"{mib}m"], held[name]
        assert values["preload"] == [CONTAINER_LIBVGPU], held[name]
        assert CONTAINER_LIBVGPU in values.get("mapped", []), held[name]
        assert values["init_error"] == ["0"], held[name]
        assert values["total_mib"] == [str(mib)], held[name]  # libvgpu virtualises cuMemGetInfo
        assert values["alloc_error"] == [str(CUDA_ERROR_OUT_OF_MEMORY)], held[name]
        allocated = int(values["allocated_mib"][0])
        assert mib - CHUNK_MIB < allocated <= mib, held[name]

    # the agent attributes each pod's memory to its pod (uid from the real kubelet's pod cgroup,
    # once its host-pids round, every second, has found the pods' processes)
    uids = {n: client.get(f"/api/v1/namespaces/{ns}/pods/{n}")["metadata"]["uid"] for n in shares}

    def both_pods_counted() -> dict[str, float] | None:
        used = container_memory(product.agent_metrics_url)
        return used if set(uids.values()) <= set(used) else None

    used = wait_for(
        both_pods_counted, timeout_s=30, what="both pods' memory in the agent's metrics"
    )
    for name in shares:
        uid = uids[name]
        allocated = int(parse(held[name])["allocated_mib"][0])
        assert used.get(uid) == allocated * 2**20, (name, uid, used)

    # both claims on the one mock GPU of the real node, each prepared (a CDI spec each)
    claims = client.items(f"{RESOURCE}/namespaces/{ns}/resourceclaims")
    assert len(claims) == 2
    devices = set()
    for claim in claims:
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        devices.add((result["driver"], result["pool"], result["device"]))
        spec = node.layout.cdi_dir / f"k8s.{DEFAULT.driver}-claim_{claim['metadata']['uid']}.json"
        assert spec.is_file(), sorted(p.name for p in node.layout.cdi_dir.iterdir())
    assert devices == {(DEFAULT.driver, node.name, "gpu-0")}

    # the real kubelet's node-local pod-resources socket names each claim's pod and container:
    # what HAMi's series read, so the agent needs no right to read pods (issue 35, item 7)
    socket = node.layout.kubelet_dir / "pod-resources" / "kubelet.sock"
    users = PodResources(socket).list_claim_users()
    for claim in claims:
        ((pod_name,),) = [(r["name"],) for r in claim["status"]["reservedFor"]]
        found = users.get((ns, claim["metadata"]["name"]), [])
        assert [(u.namespace, u.pod, u.container) for u in found] == [(ns, pod_name, "cuda")], users

    # the agent tells each pod's libvgpu its host pid (a pod's /proc shows only its own pid
    # namespace): the host-pids file beside the claim's region names a process of that pod
    for claim in claims:
        ((pod_uid, pod_name),) = [(r["uid"], r["name"]) for r in claim["status"]["reservedFor"]]
        path = vgpu_dir(node.layout) / "claims" / claim["metadata"]["uid"] / "host-pids"
        lines = wait_for(partial(_host_pid_lines, path), timeout_s=30, what=f"{path} written")
        assert lines[0] == "vgpu-host-pids 1", lines
        (entry,) = lines[1:]
        host_pid = int(entry.split()[2])
        assert f"pod{pod_uid}" in Path(f"/proc/{host_pid}/cgroup").read_text(), entry
        _assert_limits_file_mounted_read_only(host_pid, shares[pod_name])

    claim_dirs = vgpu_dir(node.layout) / "claims"
    assert claim_dirs.is_dir()
    delete_and_unprepare(product, shares)
    wait_for(
        lambda: not client.items(f"{RESOURCE}/namespaces/{ns}/resourceclaims"),
        timeout_s=60,
        what="the claims deleted",
    )
    assert not _entries(claim_dirs)
    assert not _entries(vgpu_dir(node.layout) / "limits")  # Unprepare removes the limits files


def _assert_limits_file_mounted_read_only(host_pid: int, mib: int) -> None:
    """The container sees the agent's limits file at LIMITS_MOUNT, mounted read-only (seen from
    the host through the container process's root and mount table)."""
    seen = Path(f"/proc/{host_pid}/root{LIMITS_MOUNT}").read_text().splitlines()
    limit = f"CUDA_DEVICE_MEMORY_LIMIT_{GPU['uuid']}={mib}m"
    assert seen[:2] == ["vgpu-bridge-limits 2", limit], seen
    mounts = Path(f"/proc/{host_pid}/mountinfo").read_text().splitlines()
    (mount,) = [line.split() for line in mounts if line.split()[4] == LIMITS_MOUNT]
    assert "ro" in mount[5].split(","), mount


def _host_pid_lines(path: Path) -> list[str] | None:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    return lines if len(lines) > 1 else None


def container_memory(metrics_url: str) -> dict[str, float]:
    """`vgpu_bridge_container_memory_used_bytes` summed per `pod_uid` label."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    used: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vgpu_bridge_container_memory_used_bytes":
                uid = sample.labels["pod_uid"]
                used[uid] = used.get(uid, 0.0) + sample.value
    return used


def _entries(directory: Path) -> list[str]:
    """What is left in the agent's claims/ dir (Unprepare removes each claim's region dir)."""
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
