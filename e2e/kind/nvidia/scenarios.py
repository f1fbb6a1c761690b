"""Issue 37 on kind with NVIDIA's real kubelet plugin (``make e2e-nvidia``; run only against the
cluster ``python -m e2e.kind.nvidia up`` made, so this file is not named test_*): NVIDIA's
``gpu-kubelet-plugin`` built from the user's checkout publishes and prepares the mock NVML's
cards with ``--consumable-shares=100``; our chart runs with ``nvidiaDriver.enabled`` (webhook
profile ``nvidia``, the agent in enforcer mode). The same scenarios as the real-node proof:
a HAMi pod runs on NVIDIA's share held to its limits by libvgpu (over the fake CUDA driver,
which plays the card of the ``/dev/nvidia<N>`` node NVIDIA's CDI spec injects), a second pod on
the same card gets its own share, and Unprepare leaves no CDI file of either driver.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e.kind import cudaimage
from e2e.kind.nvidia import driverroot, modes, plugin
from e2e.kind.nvidia.tier import HAMI_EXAMPLE_IMAGE
from e2e.kind.scenarios import (
    CDI_DIR,
    CUDA_ERROR_OUT_OF_MEMORY,
    RESOURCE,
    VGPU_DIR,
    api,
    core,
    delete_pods,
    kind,
    log_with,
    node_exec,
    wait_running,
)
from e2e.realnode.product import parse
from e2e.upstream_examples import hami_examples
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT, ENFORCER_DRIVER, ENFORCER_REQUEST
from vgpu_bridge.kube import KubeApi

pytestmark = pytest.mark.e2e
__all__ = ["api", "core", "kind"]  # fixtures, used by name
Json = dict[str, Any]
CHUNK_MIB = 50
HOLD_S = "600"
ENFORCER_DEVICE = "enforcer"
LIMITS_MOUNT = "/etc/vgpu-bridge/limits.conf"
CRICTL = ("crictl", "--runtime-endpoint", "unix:///run/containerd/containerd.sock")
#: HAMi's own examples, beside the checkout as the team keeps them (or where the variable says)
UPSTREAM_EXAMPLES = hami_examples()


@pytest.fixture(scope="module")
def mock_node(api: KubeApi) -> str:
    """The worker that holds the mock driver root and runs NVIDIA's plugin."""
    nodes = api.list("/api/v1/nodes", labelSelector=f"{plugin.MOCK_NODE_LABEL}=true")["items"]
    (node,) = [str(n["metadata"]["name"]) for n in nodes]
    return node


@pytest.fixture(scope="module")
def mode() -> str:
    """NVIDIA's ``--consumable-shares`` for this run (``NVIDIA_CONSUMABLE_SHARES``, default 100)."""
    return modes.mode_from_env()


@pytest.fixture
def namespace(api: KubeApi) -> Iterator[str]:
    name = f"nvidia-{secrets.token_hex(3)}"
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": name}})  # fmt: skip
    yield name
    delete_pods(api, name)
    api.delete(f"/api/v1/namespaces/{name}")


def hami_pod(name: str, gpumem_mib: int, gpucores: int, card: int | None = None) -> Json:
    """A HAMi pod as HAMi users write it: the CUDA probe holding what it got for a while."""
    annotations = {"nvidia.com/use-gpuuuid": driverroot.uuid_for(card)} if card is not None else {}
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": gpumem_mib, "nvidia.com/gpucores": gpucores}
    container = {
        "name": "cuda",
        "image": cudaimage.CUDA_IMAGE,
        "imagePullPolicy": "Never",
        "args": [str(CHUNK_MIB), HOLD_S],
        "resources": {"limits": limits},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }


def claim_of(api: KubeApi, namespace: str, pod_name: str) -> Json:
    claims = api.list(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")["items"]
    (claim,) = [c for c in claims if c["status"]["reservedFor"][0]["name"] == pod_name]
    found: Json = claim
    return found


def results_by_driver(claim: Json) -> dict[str, list[Json]]:
    found: dict[str, list[Json]] = {}
    for result in claim["status"]["allocation"]["devices"]["results"]:
        found.setdefault(result["driver"], []).append(result)
    return found


def container_spec(node: str, namespace: str, pod_name: str) -> Json:
    """The OCI spec containerd gave the pod's container (after both drivers' CDI edits)."""
    labels = [f"--label=io.kubernetes.pod.name={pod_name}",
              f"--label=io.kubernetes.pod.namespace={namespace}"]  # fmt: skip
    (container,) = node_exec(node, *CRICTL, "ps", "-q", *labels).split()
    spec: Json = json.loads(node_exec(node, *CRICTL, "inspect", container))["info"]["runtimeSpec"]
    return spec


def probe_values(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, list[str]]:
    return parse(log_with(core, namespace, name, "alloc_error="))


def assert_held_to(values: dict[str, list[str]], mib: int) -> None:
    """libvgpu (preloaded) shows the share as the card and refuses past it."""
    assert values["init_error"] == ["0"], values
    assert values["total_mib"] == [str(mib)], values
    assert values["alloc_error"] == [str(CUDA_ERROR_OUT_OF_MEMORY)], values
    assert mib - CHUNK_MIB < int(values["allocated_mib"][0]) <= mib, values


def limits_file(node: str, claim_uid: str) -> str:
    return node_exec(node, "cat", f"{VGPU_DIR}/limits/{claim_uid}.conf")


def cdi_files(node: str) -> list[str]:
    return node_exec(node, "ls", CDI_DIR).split()


# --- what NVIDIA's real plugin publishes -------------------------------------------------------


def test_nvidias_plugin_publishes_the_mock_cards_in_its_consumable_shares_mode(
    api: KubeApi, mock_node: str, mode: str
) -> None:
    """The shapes docs/reference/nvidia-dra-driver.md §1.2-1.3 gives for the run's mode."""
    slices = api.list(f"{RESOURCE}/resourceslices",
                      fieldSelector=f"spec.driver={plugin.DRIVER}")["items"]  # fmt: skip
    (published,) = slices
    assert published["spec"]["nodeName"] == mock_node
    assert published["spec"]["pool"]["name"] == mock_node
    devices = {d["name"]: d for d in published["spec"]["devices"]}
    assert sorted(devices) == [f"gpu-{i}" for i in range(driverroot.GPU_COUNT)]
    for minor in range(driverroot.GPU_COUNT):
        device = devices[f"gpu-{minor}"]
        attributes = device["attributes"]
        assert attributes["type"] == {"string": "gpu"}
        assert attributes["uuid"] == {"string": driverroot.uuid_for(minor)}
        assert attributes["productName"] == {"string": driverroot.PRODUCT}
        assert attributes["driverVersion"] == {"version": "550.163.1"}
        assert "resource.kubernetes.io/pciBusID" in attributes
        assert device["allowMultipleAllocations"] is True
        assert device["capacity"] == modes.card_capacity(mode, driverroot.CARD_MEMORY)


def test_our_agent_publishes_only_its_enforcer_beside_nvidias_cards(
    api: KubeApi, mock_node: str
) -> None:
    ours = api.list(f"{RESOURCE}/resourceslices", fieldSelector=f"spec.driver={DEFAULT.driver}")
    assert ours["items"] == []  # never two bookkeepers of one card
    enforcers = api.list(f"{RESOURCE}/resourceslices",
                         fieldSelector=f"spec.driver={ENFORCER_DRIVER}")["items"]  # fmt: skip
    on_mock = [s for s in enforcers if s["spec"]["nodeName"] == mock_node]
    (enforcer_slice,) = on_mock
    (device,) = enforcer_slice["spec"]["devices"]
    assert device["name"] == ENFORCER_DEVICE
    assert device["allowMultipleAllocations"] is True
    assert enforcer_slice["spec"]["pool"]["name"] == mock_node


# --- a HAMi pod on NVIDIA's share --------------------------------------------------------------


def test_a_hami_pod_runs_on_nvidias_share_held_to_its_limits(
    api: KubeApi, core: client.CoreV1Api, namespace: str, mock_node: str, mode: str
) -> None:
    api.create(f"/api/v1/namespaces/{namespace}/pods", hami_pod("hami", 3000, 30))
    running = wait_running(api, namespace, "hami")
    assert running["spec"]["nodeName"] == mock_node  # the one node with NVIDIA and our enforcer
    claim = claim_of(api, namespace, "hami")
    results = results_by_driver(claim)
    (share,) = results[plugin.DRIVER]
    (enforcer,) = results[ENFORCER_DRIVER]
    assert (share["pool"], enforcer["pool"], enforcer["device"]) == (
        mock_node, mock_node, ENFORCER_DEVICE)  # fmt: skip
    assert share["consumedCapacity"] == modes.consumed(mode, 3000, 30)
    minor = int(share["device"].removeprefix("gpu-"))
    uuid = driverroot.uuid_for(minor)
    limits = limits_file(mock_node, claim["metadata"]["uid"]).splitlines()
    assert f"CUDA_DEVICE_MEMORY_LIMIT_{uuid}=3000m" in limits, limits
    assert f"CUDA_DEVICE_SM_LIMIT_{uuid}={modes.sm_limit(mode, 30)}" in limits, limits
    spec = container_spec(mock_node, namespace, "hami")
    devices = {d["path"]: (d["major"], d["minor"]) for d in spec["linux"].get("devices") or []}
    assert devices.get(f"/dev/nvidia{minor}") == (driverroot.NVIDIA_MAJOR, minor), devices
    cards = [p for p in devices if p.removeprefix("/dev/nvidia").isdigit()]
    assert cards == [f"/dev/nvidia{minor}"], devices  # its card only, from NVIDIA's spec
    mounts = {m["destination"] for m in spec["mounts"]}
    assert {LIMITS_MOUNT, "/etc/ld.so.preload"} <= mounts, mounts
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["process"]["env"]  # NVIDIA's spec, not ours
    values = probe_values(core, namespace, "hami")
    assert any("libvgpu" in m for m in values.get("mapped", [])), values
    assert_held_to(values, 3000)


def test_a_second_pod_on_the_same_card_gets_its_own_share(
    api: KubeApi, core: client.CoreV1Api, namespace: str, mock_node: str, mode: str
) -> None:
    shares = {"first": (3000, 30), "second": (2000, 20)}
    for name, (mib, cores) in shares.items():
        api.create(f"/api/v1/namespaces/{namespace}/pods", hami_pod(name, mib, cores, card=0))
    uuid = driverroot.uuid_for(0)
    for name, (mib, cores) in shares.items():
        wait_running(api, namespace, name)
        claim = claim_of(api, namespace, name)
        (share,) = results_by_driver(claim)[plugin.DRIVER]
        assert share["device"] == "gpu-0"
        assert share["consumedCapacity"] == modes.consumed(mode, mib, cores)
        limits = limits_file(mock_node, claim["metadata"]["uid"]).splitlines()
        assert f"CUDA_DEVICE_MEMORY_LIMIT_{uuid}={mib}m" in limits, (name, limits)
        sm = modes.sm_limit(mode, cores)
        assert f"CUDA_DEVICE_SM_LIMIT_{uuid}={sm}" in limits, (name, limits)
        assert_held_to(probe_values(core, namespace, name), mib)
    share_ids = {results_by_driver(claim_of(api, namespace, n))[plugin.DRIVER][0]["shareID"]
                 for n in shares}  # fmt: skip
    assert len(share_ids) == 2  # two shares of one card, both held at once (HOLD_S)


def enforced_template(name: str, mode: str, gpumem_mib: int, gpucores: int) -> Json:
    """A claim template of the webhook's shape for the nvidia profile: NVIDIA's share and our
    enforcer's request ``vgpu-limits`` with its config."""
    share = {"deviceClassName": plugin.DRIVER, "allocationMode": "ExactCount", "count": 1,
             "capacity": {"requests": modes.consumed(mode, gpumem_mib, gpucores)}}  # fmt: skip
    limits = {"deviceClassName": ENFORCER_DRIVER, "allocationMode": "ExactCount", "count": 1}
    config = {"apiVersion": "gpu.vgpu-bridge.io/v1alpha1", "kind": "GpuShareConfig",
              "cores": gpucores}  # fmt: skip
    devices = {
        "requests": [{"name": "gpu", "exactly": share},
                     {"name": ENFORCER_REQUEST, "exactly": limits}],
        "config": [{"requests": [ENFORCER_REQUEST],
                    "opaque": {"driver": ENFORCER_DRIVER, "parameters": config}}],
    }  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name}, "spec": {"spec": {"devices": devices}}}  # fmt: skip


def test_a_container_that_names_only_nvidias_request_still_gets_its_limits(
    api: KubeApi, core: client.CoreV1Api, namespace: str, mock_node: str, mode: str
) -> None:
    """docs/reference/nvidia-dra-driver.md §6.5: a container entry ``request: gpu`` gets only
    the devices of that request; ours is returned with no request names, so the real kubelet
    gives its edits (libvgpu, ld.so.preload, the limits file) to this container too."""
    api.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
               enforced_template("share", mode, 2000, 20))  # fmt: skip
    pod = hami_pod("narrow", 2000, 20)
    (container,) = pod["spec"]["containers"]
    container["resources"] = {"claims": [{"name": "share", "request": "gpu"}]}
    pod["spec"]["resourceClaims"] = [{"name": "share", "resourceClaimTemplateName": "share"}]
    api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    wait_running(api, namespace, "narrow")
    spec = container_spec(mock_node, namespace, "narrow")
    mounts = {m["destination"] for m in spec["mounts"]}
    assert {LIMITS_MOUNT, "/etc/ld.so.preload"} <= mounts, mounts
    assert_held_to(probe_values(core, namespace, "narrow"), 2000)


def test_unprepare_leaves_no_cdi_file_of_either_driver(
    api: KubeApi, namespace: str, mock_node: str
) -> None:
    api.create(f"/api/v1/namespaces/{namespace}/pods", hami_pod("gone", 1000, 10))
    wait_running(api, namespace, "gone")
    uid = claim_of(api, namespace, "gone")["metadata"]["uid"]
    during = [f for f in cdi_files(mock_node) if uid in f]
    assert f"k8s.gpu.nvidia.com-claim_{uid}.yaml" in during, during  # NVIDIA's transient spec
    assert len(during) == 2, during  # and ours
    delete_pods(api, namespace)

    def left() -> list[str]:
        files = [f for f in cdi_files(mock_node) if uid in f]
        limits = node_exec(mock_node, "sh", "-c", f"ls {VGPU_DIR}/limits 2>/dev/null || true")
        return files + [f for f in limits.split() if uid in f]

    assert wait_for(lambda: not left(), timeout_s=60, what="no CDI or limits file of the claim")


def test_hamis_own_example_runs_unchanged_on_nvidias_share(
    api: KubeApi, namespace: str, mock_node: str, mode: str
) -> None:
    """HAMi's ``default_use.yaml`` (gpu 1, gpumem 3000, gpucores 30), applied as its text."""
    text = (UPSTREAM_EXAMPLES / "default_use.yaml").read_text()
    example: Json = yaml.safe_load(text)
    assert example["spec"]["containers"][0]["image"] == HAMI_EXAMPLE_IMAGE
    api.create(f"/api/v1/namespaces/{namespace}/pods", example)
    name = example["metadata"]["name"]
    assert wait_running(api, namespace, name)["spec"]["nodeName"] == mock_node
    claim = claim_of(api, namespace, name)
    (share,) = results_by_driver(claim)[plugin.DRIVER]
    assert share["consumedCapacity"] == modes.consumed(mode, 3000, 30)
    uuid = driverroot.uuid_for(int(share["device"].removeprefix("gpu-")))
    limits = limits_file(mock_node, claim["metadata"]["uid"]).splitlines()
    assert f"CUDA_DEVICE_MEMORY_LIMIT_{uuid}=3000m" in limits, limits
    assert f"CUDA_DEVICE_SM_LIMIT_{uuid}={modes.sm_limit(mode, 30)}" in limits, limits
    mounts = {m["destination"] for m in container_spec(mock_node, namespace, name)["mounts"]}
    assert {LIMITS_MOUNT, "/etc/ld.so.preload"} <= mounts, mounts
