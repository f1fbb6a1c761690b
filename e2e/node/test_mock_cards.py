"""The agent with mock cards from its Node's label and the stand-in driver, on the real control
plane: it reads its own Node, publishes the cards the label names under stable NVML-shaped
UUIDs, and a share scheduled there is prepared with the fake libcuda and NVML (copied under the
vgpu dir) in its spec, set to the card; the fake loaded with the spec's env presents that card.
A node whose label names no cards keeps the agent from starting, saying why."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster, create_fake_node
from e2e.cluster.client import Json
from e2e.dra_objects import pod_with_claim_template, share_template
from e2e.node.agent import (
    AgentProcess,
    GrpcPreparer,
    published_devices,
    remove_node,
    running_agent,
)
from e2e.pods import claim_of, only_result, running_pod
from tests.unit.node.mock_driver_files import LIBS, VERSION, built_mock_driver
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.mock_cards import card_uuid

pytestmark = pytest.mark.e2e
RESOURCE = "/apis/resource.k8s.io/v1"
LABEL = "vgpu-bridge.io/mock-gpus"
GiB = 2**30


@pytest.fixture(scope="module")
def mock_driver_source() -> Path:
    """What the agent image ships at /opt/vgpu-bridge/mock-driver (`make mock-driver`)."""
    return built_mock_driver()


@pytest.fixture(scope="module")
def labelled_agent(
    kube: KubeClient, e2e_cluster: LocalCluster, our_device_class: str, mock_driver_source: Path
) -> Iterator[tuple[str, AgentProcess, KubeletStandIn]]:
    node = f"e2e-mock-{secrets.token_hex(3)}"
    create_fake_node(kube, node, labels={LABEL: "2xl4-24gb"})
    env = {"VGPU_BRIDGE_MOCK_GPUS_NODE_LABEL": LABEL,
           "VGPU_BRIDGE_MOCK_DRIVER": str(mock_driver_source)}  # fmt: skip
    try:
        with running_agent(node, e2e_cluster.kubeconfig, None, extra_env=env) as agent:
            preparer = GrpcPreparer(agent.dra_socket)
            with KubeletStandIn(kube, [node], preparer=preparer) as standin:
                yield node, agent, standin
            preparer.close()
    finally:
        remove_node(kube, node)


def test_the_agent_publishes_the_cards_its_nodes_label_names(
    kube: KubeClient, labelled_agent: tuple[str, AgentProcess, KubeletStandIn]
) -> None:
    node = labelled_agent[0]
    devices = published_devices(kube, node)
    assert sorted(devices) == ["gpu-0", "gpu-1"]
    for index in range(2):
        attributes = devices[f"gpu-{index}"]["attributes"]
        assert attributes["uuid"] == {"string": card_uuid(node, index)}
        assert attributes["productName"] == {"string": "NVIDIA L4"}
        assert attributes["driverVersion"] == {"version": "570.124.6"}  # semver: no leading 0
        assert devices[f"gpu-{index}"]["capacity"]["memory"]["value"] == "24Gi"


def test_a_share_gets_the_stand_in_driver_set_to_its_card(
    kube: KubeClient, namespace: str, labelled_agent: tuple[str, AgentProcess, KubeletStandIn]
) -> None:
    node, agent, _ = labelled_agent
    template = share_template("share", device_class_name=DEFAULT.device_class,
                              capacity={"memory": "3000Mi", "cores": "30"})  # fmt: skip
    kube.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates", template)
    kube.create(f"/api/v1/namespaces/{namespace}/pods",
                pod_with_claim_template("share", template="share", node=node))  # fmt: skip
    pod = running_pod(kube, namespace, "share")
    claim = claim_of(kube, namespace, pod)
    card = card_uuid(node, int(only_result(claim)["device"].removeprefix("gpu-")))
    spec: Json = json.loads(agent.layout.spec_path(claim["metadata"]["uid"]).read_text())
    edits = spec["containerEdits"]
    copy = agent.root / "vgpu" / "mock-driver" / LIBS
    mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
    assert mounts["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] == f"{copy}/libcuda.so.{VERSION}"
    assert mounts["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] == (
        f"{copy}/libnvidia-ml.so.{VERSION}"
    )
    env = dict(entry.split("=", 1) for entry in edits["env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == card
    assert env["FAKE_CUDA_MEMORY"] == str(24 * GiB)
    assert env["FAKE_CUDA_SM_COUNT"] == "58"
    assert env["FAKE_NVML_NAME"] == "NVIDIA L4"
    assert env["FAKE_NVML_DRIVER_VERSION"] == VERSION
    assert "deviceNodes" not in edits
    assert _card_the_fakes_present(mounts, env) == [1, card, 24 * GiB, "NVIDIA L4", VERSION]


PRESENTED = """
import ctypes, json, sys
cuda, nvml = ctypes.CDLL(sys.argv[1]), ctypes.CDLL(sys.argv[2])
count, device, total = ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
uuid, handle = ctypes.create_string_buffer(16), ctypes.c_void_p()
name, version = ctypes.create_string_buffer(96), ctypes.create_string_buffer(80)
assert cuda.cuInit(0) == 0
assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cuda.cuDeviceTotalMem_v2(ctypes.byref(total), device) == 0
assert cuda.cuDeviceGetUuid(uuid, device) == 0
assert nvml.nvmlInit_v2() == 0
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
assert nvml.nvmlDeviceGetName(handle, name, 96) == 0
assert nvml.nvmlSystemGetDriverVersion(version, 80) == 0
h = uuid.raw.hex()
shaped = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
print(json.dumps([count.value, shaped, total.value, name.value.decode(), version.value.decode()]))
"""


def _card_the_fakes_present(mounts: dict[str, str], env: dict[str, str]) -> list[object]:
    """What the copied fake libcuda and NVML report under the spec's env, in a process of their
    own (they read their settings once): the device count, the first card's UUID and memory
    (CUDA), its name and the driver version (NVML)."""
    libraries = [mounts[f"/usr/lib/x86_64-linux-gnu/{name}"]
                 for name in ("libcuda.so.1", "libnvidia-ml.so.1")]  # fmt: skip
    fake_env = {k: v for k, v in env.items() if k.startswith(("FAKE_", "NVIDIA_"))}
    done = subprocess.run([sys.executable, "-c", PRESENTED, *libraries], env=fake_env,
                          capture_output=True, text=True, check=True, timeout=30)  # fmt: skip
    presented: list[object] = json.loads(done.stdout)
    return presented


def test_a_label_that_names_no_cards_keeps_the_agent_from_starting_saying_why(
    kube: KubeClient, e2e_cluster: LocalCluster, tmp_path: Path
) -> None:
    node = f"e2e-mock-{secrets.token_hex(3)}"
    create_fake_node(kube, node, labels={LABEL: "8xb200-192gb"})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "vgpu_bridge.cli", "node", "--node-name", node,
             "--mock-gpus-node-label", LABEL, "--kubeconfig", str(e2e_cluster.kubeconfig),
             "--plugin-dir", str(tmp_path), "--registry-dir", str(tmp_path),
             "--cdi-dir", str(tmp_path / "cdi"), "--vgpu-dir", str(tmp_path / "vgpu"),
             "--metrics-listen", ""],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
    finally:
        kube.delete(f"/api/v1/nodes/{node}")
    assert done.returncode == 1, done.stderr
    assert (
        f"cannot start: Node {node}: label {LABEL}='8xb200-192gb': 'b200-192gb' is neither a "
        "card profile"
    ) in done.stderr
    assert "Traceback" not in done.stderr
