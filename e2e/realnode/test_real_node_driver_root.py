"""A pod gets its CUDA stack from its claim alone, on each driver layout (issue 36).

The real node has no NVIDIA runtime (containerd runs runc only), the pods name no
runtimeClassName and the CUDA image holds no driver library: ``cudaprobe`` needs ``libcuda.so.1``
(DT_NEEDED, no RUNPATH) and the image's loader must find it on its default path. The driver is
the stand-in install of driver_root.py (the fake libcuda/libnvidia-ml of native/vgpu's tests as
driver 555.42.06, plus an nvidia-smi that dlopens libnvidia-ml.so.1). In each layout one pod
asks ``nvidia.com/gpumem``; inside it ``libcuda.so.1`` is mapped from /usr/lib/x86_64-linux-gnu
(the claim's CDI mount), libvgpu.so is mapped and holds the pod to its share (cuMemGetInfo's
total, CUDA_ERROR_OUT_OF_MEMORY past it), and /usr/bin/nvidia-smi runs and sees the GPU through
the libnvidia-ml.so.1 the same spec mounted. The layouts:

a. a host install: the driver root is a tier directory playing ``/``, read by the agent there;
b. GPU Operator's driver container: the driver root at ``/run/nvidia/driver`` (made only where
   nothing is), which the agent reads through a read-only bind mount elsewhere, as the chart's
   ``/driver-root``; the spec's host paths still name ``/run/nvidia/driver``;
c. a toolkit-style CDI spec (``nvidia.com/gpu``, whose edits run a hook that is not there) beside
   ours: our pod still starts and works, and a pod without a claim gets nothing from it, even
   when its annotations name that spec's device.

One control plane and node for the module; only the agent restarts between layouts.
Collected only with ``VGPU_REALNODE=1`` (``make e2e-realnode``); see conftest.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from e2e.cluster.client import Json
from e2e.realnode import containerd, driver_root
from e2e.realnode.agent import CONTAINER_LIBVGPU, restart_agent
from e2e.realnode.driver_root import DriverRootFlags
from e2e.realnode.node import CUDA_IMAGE, cuda_image_spec, install_driver
from e2e.realnode.product import GPU, Product, delete_and_unprepare, parse
from e2e.realnode.spike import node_pod, pod_log, probe_pod, run_pod
from e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

CHUNK_MIB = 50
SHARE_MIB = 1000
HOLD_S = 600
CUDA_ERROR_OUT_OF_MEMORY = 2
#: the image's loader (Debian's) searches this dir by default; /usr/lib64 is for RHEL images
DEBIAN_LIBRARY_DIR = "/usr/lib/x86_64-linux-gnu"
NVIDIA_SMI = "/usr/bin/nvidia-smi"
TOOLKIT_SPEC = "nvidia.yaml"


@dataclass
class Agents:
    """The module's agent and the driver root it was started with (restarted only to change)."""

    product: Product
    flags: DriverRootFlags

    def use(self, flags: DriverRootFlags) -> None:
        if flags == self.flags:
            return
        node = self.product.node
        assert node.native is not None
        restart_agent(node, self.product.cluster, node.native, [GPU], driver_root=flags)
        self.flags = flags


@pytest.fixture(scope="module")
def agents(product: Product) -> Agents:
    assert product.node.driver_root is not None
    return Agents(product, DriverRootFlags(product.node.driver_root))


@pytest.fixture
def host_install(agents: Agents) -> Path:
    """Layout a: the agent reads the stand-in install where containerd does."""
    root = agents.product.node.driver_root
    assert root is not None
    agents.use(DriverRootFlags(root))
    return root


@pytest.fixture
def operator_install(agents: Agents) -> Iterator[tuple[Path, Path]]:
    """Layout b: the install at /run/nvidia/driver, the agent reading it through a read-only
    bind mount; both undone after the test (and by ``down`` after a crash)."""
    node = agents.product.node
    assert node.native is not None
    layout = node.layout
    root, mount = layout.operator_driver_root, layout.driver_root_mount
    driver_root.claim_directory(root, record=layout.created_dirs)  # refuses one not ours
    try:
        install_driver(root, node.native)
        driver_root.bind_read_only(root, mount)
        try:
            agents.use(DriverRootFlags(root, mount))
            yield root, mount
        finally:
            assert node.driver_root is not None
            agents.use(DriverRootFlags(node.driver_root))
            driver_root.unmount(mount)
    finally:
        assert driver_root.release_directories(layout.created_dirs) == []
    assert not root.exists()


def cuda_pod(name: str, node_name: str) -> Json:
    """cudaprobe up to its share, then nvidia-smi, then it holds until deleted (the kubelet
    unprepares a claim once its pod has ended); no runtime class, no driver in the image."""
    container = {
        "name": "cuda",
        "image": CUDA_IMAGE,
        "args": [str(CHUNK_MIB), str(HOLD_S), NVIDIA_SMI],
        "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": SHARE_MIB}},
    }
    return node_pod(name, node_name, container)


@dataclass(frozen=True)
class ClaimedRun:
    output: str
    #: the claim's CDI spec as the agent wrote it
    spec: Json


def run_claimed_pod(product: Product, name: str) -> ClaimedRun:
    """Run a CUDA pod until it has printed all and holds; its output and its claim's spec."""
    client, node, ns = product.client, product.node, product.namespace
    created = client.create(f"/api/v1/namespaces/{ns}/pods", cuda_pod(name, node.name))
    assert "runtimeClassName" not in created["spec"], created["spec"]
    assert created["spec"].get("resourceClaims"), created["spec"]  # translated by our webhook

    def holding() -> str | None:
        pod = client.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        output = pod_log(node, pod, "cuda")
        assert pod["status"].get("phase") in ("Pending", "Running"), (pod["status"], output)
        return output if "program_status=" in output else None

    try:
        output = wait_for(holding, timeout_s=120, what=f"{name} holding its share")
        (spec_file,) = node.layout.cdi_dir.glob("*.json")
        return ClaimedRun(output, json.loads(spec_file.read_text()))
    finally:
        delete_and_unprepare(product, [name])


def assert_cuda_stack_from_the_claim(output: str) -> None:
    values = parse(output)
    mapped = values.get("mapped", [])
    assert f"{DEBIAN_LIBRARY_DIR}/libcuda.so.1" in mapped, output
    assert CONTAINER_LIBVGPU in mapped, output  # libvgpu wraps the libcuda the loader found
    assert values["init_error"] == ["0"], output
    assert values["total_mib"] == [str(SHARE_MIB)], output
    assert values["alloc_error"] == [str(CUDA_ERROR_OUT_OF_MEMORY)], output
    assert SHARE_MIB - CHUNK_MIB < int(values["allocated_mib"][0]) <= SHARE_MIB, output
    assert values["smi.library"] == [f"{DEBIAN_LIBRARY_DIR}/libnvidia-ml.so.1"], output
    assert values["smi.uuid"] == [GPU["uuid"]], output
    assert values["program_status"] == ["0"], output


def driver_mounts(spec: Json) -> dict[str, str]:
    """containerPath -> hostPath of the spec's mounts of the driver's files."""
    edits = spec.get("containerEdits") or {}
    return {
        mount["containerPath"]: mount["hostPath"]
        for mount in edits.get("mounts") or ()
        if mount["containerPath"].startswith((f"{DEBIAN_LIBRARY_DIR}/", "/usr/lib64/"))
        or mount["containerPath"] == NVIDIA_SMI
    }


def assert_mounts_from(spec: Json, root: Path) -> None:
    mounts = driver_mounts(spec)
    for container_path in (
        f"{DEBIAN_LIBRARY_DIR}/libcuda.so.1",
        f"{DEBIAN_LIBRARY_DIR}/libnvidia-ml.so.1",
        "/usr/lib64/libcuda.so.1",
        NVIDIA_SMI,
    ):
        assert container_path in mounts, mounts
    for host_path in mounts.values():
        assert host_path.startswith(f"{root}/"), mounts
    assert mounts[f"{DEBIAN_LIBRARY_DIR}/libcuda.so.1"] == (
        f"{root}/{driver_root.LIBRARY_DIR}/libcuda.so.{driver_root.DRIVER_VERSION}"
    )


def test_no_nvidia_runtime_on_the_node_and_no_driver_in_the_image(product: Product) -> None:
    node = product.node
    config = (node.layout.etc / "containerd.toml").read_text()
    assert "nvidia" not in config.lower()
    assert containerd.render_config(node.layout, node.bin_dir) == config
    assert node.native is not None
    for program in (node.native.cudaprobe, node.native.cudalaunch):
        dynamic = subprocess.run(
            ["readelf", "-d", str(program)], capture_output=True, text=True, check=True
        ).stdout
        assert "Shared library: [libcuda.so.1]" in dynamic, dynamic
        assert "RUNPATH" not in dynamic, dynamic
        assert "RPATH" not in dynamic, dynamic
    image = cuda_image_spec(node.native)
    assert not [path for path in image.files if "libcuda" in path or "libnvidia" in path]
    assert not [entry for entry in image.env if entry.startswith("LD_LIBRARY_PATH=")]


def test_host_install_a_pod_gets_its_cuda_stack_from_the_claim_alone(
    product: Product, host_install: Path
) -> None:
    run = run_claimed_pod(product, "driver-host")
    assert_cuda_stack_from_the_claim(run.output)
    assert_mounts_from(run.spec, host_install)


def test_gpu_operator_driver_root_seen_through_a_read_only_mount(
    product: Product, operator_install: tuple[Path, Path]
) -> None:
    root, mount = operator_install
    assert os.statvfs(mount).f_flag & os.ST_RDONLY  # the agent's view cannot be written
    run = run_claimed_pod(product, "driver-operator")
    assert_cuda_stack_from_the_claim(run.output)
    assert_mounts_from(run.spec, root)  # containerd's paths, not the agent's mount
    assert str(mount) not in json.dumps(run.spec)


def toolkit_spec(driver: Path, missing_hook: Path) -> Json:
    """What the NVIDIA toolkit's generator writes for one GPU (facts of its CDI spec: kind
    nvidia.com/gpu, a device per UUID and `all`, device nodes, the driver's files mounted, a
    createContainer hook run from the host), here with a hook binary that does not exist."""
    library = f"{driver_root.LIBRARY_DIR}/libcuda.so.{driver_root.DRIVER_VERSION}"
    nodes = [{"path": "/dev/nvidia0"}]
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {"name": GPU["uuid"], "containerEdits": {"deviceNodes": nodes}},
            {"name": "all", "containerEdits": {"deviceNodes": nodes}},
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}],
            "mounts": [
                {
                    "hostPath": f"{driver}/{library}",
                    "containerPath": f"/{library}",
                    "options": ["ro", "nosuid", "nodev", "bind"],
                }
            ],
            "hooks": [
                {
                    "hookName": "createContainer",
                    "path": str(missing_hook),
                    "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", DEBIAN_LIBRARY_DIR],
                }
            ],
        },
    }


def test_a_toolkit_spec_beside_ours_changes_nothing(product: Product, host_install: Path) -> None:
    layout = product.node.layout
    missing_hook = layout.root / "toolkit" / "usr" / "bin" / "nvidia-cdi-hook"
    assert not missing_hook.exists()
    spec_file = layout.cdi_dir / TOOLKIT_SPEC
    spec_file.write_text(yaml.safe_dump(toolkit_spec(host_install, missing_hook)))
    try:
        run = run_claimed_pod(product, "driver-beside-toolkit")
        assert_cuda_stack_from_the_claim(run.output)
        assert "nvidia.com/gpu" not in json.dumps(run.spec)
        assert spec_file.is_file()  # the agent leaves others' specs alone

        # a pod without a claim gets nothing of it, even naming its device in an annotation
        pod = probe_pod("no-claim", product.node.name, args=("no-claim",))
        pod["metadata"]["annotations"] = {"cdi.k8s.io/e2e": "nvidia.com/gpu=all"}
        unclaimed = run_pod(product.client, product.node, pod, product.namespace)
        assert unclaimed.phase == "Succeeded", (unclaimed.log, unclaimed.events)
        values = parse(unclaimed.log)
        assert values["probe"] == ["no-claim"], unclaimed.log
        for key in ("mount", "dev", "mapped", "env.NVIDIA_VISIBLE_DEVICES"):
            assert key not in values, unclaimed.log
        assert not [key for key in values if key.startswith("env.CUDA_")], unclaimed.log
    finally:
        spec_file.unlink()
