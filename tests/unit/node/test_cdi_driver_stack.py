"""A claim's spec carries the node's driver: its libraries under their SONAMEs in both library
dirs images use, its binaries, and device nodes from the driver root when they are there."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from tests.unit.node.claims import BY_NAME, NODE, allocated_claim, result
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.allocation import ClaimShares, claim_shares
from vgpu_bridge.node.cdi import CdiLayout, build_spec, spec_text
from vgpu_bridge.node.driver_root import DriverLibrary, DriverStack

UID = "8f1d0000-0000-4000-8000-0000000000aa"
VERSION = "555.42.06"
LIB = "usr/lib64"
STACK = DriverStack(
    root=Path("/run/nvidia/driver"),
    version=VERSION,
    triplet="x86_64-linux-gnu",
    libraries=(
        DriverLibrary(f"{LIB}/libcuda.so.{VERSION}", "libcuda.so.1", "libcuda"),
        DriverLibrary(
            f"{LIB}/libnvidia-nvvm.so.{VERSION}", "libnvidia-nvvm.so.4", "libnvidia-nvvm"
        ),
        DriverLibrary(f"{LIB}/libnvidia-ml.so.{VERSION}", "libnvidia-ml.so.1", "libnvidia-ml"),
    ),
    binaries=("usr/bin/nvidia-smi",),
    devices_in_root=True,
)
PLAIN = CdiLayout(
    cdi_dir=Path("/var/run/cdi"), vgpu_dir=Path("/usr/local/vgpu"), driver=DEFAULT.driver
)
WITH_DRIVER = replace(PLAIN, driver_stack=STACK)
READ_ONLY = ["ro", "nosuid", "nodev", "bind"]


def _claim(*, real: bool) -> ClaimShares:
    gpus = {n: replace(g, minor=g.index) for n, g in BY_NAME.items()} if real else BY_NAME
    claim = allocated_claim(result("gpu-1"), uid=UID)
    return claim_shares(claim, uid=UID, node=NODE, profile=DEFAULT, gpus=gpus)


def _driver_mount(host: str, container: str) -> dict[str, object]:
    return {"hostPath": f"/run/nvidia/driver/{host}", "containerPath": container,
            "options": READ_ONLY}  # fmt: skip


def test_each_library_is_mounted_at_its_soname_in_both_library_dirs_and_the_binaries_in_bin() -> (
    None
):
    mounts = build_spec(_claim(real=True), WITH_DRIVER)["containerEdits"]["mounts"]
    plain = build_spec(_claim(real=True), PLAIN)["containerEdits"]["mounts"]
    libcuda, nvvm, nvml = (f"{LIB}/{name}.so.{VERSION}" for name in
                           ("libcuda", "libnvidia-nvvm", "libnvidia-ml"))  # fmt: skip
    debian, rhel = "/usr/lib/x86_64-linux-gnu", "/usr/lib64"
    assert mounts == [
        *plain,
        _driver_mount(libcuda, f"{debian}/libcuda.so.1"),
        _driver_mount(libcuda, f"{debian}/libcuda.so"),
        _driver_mount(nvvm, f"{debian}/libnvidia-nvvm.so.4"),
        _driver_mount(nvml, f"{debian}/libnvidia-ml.so.1"),
        _driver_mount(libcuda, f"{rhel}/libcuda.so.1"),
        _driver_mount(libcuda, f"{rhel}/libcuda.so"),
        _driver_mount(nvvm, f"{rhel}/libnvidia-nvvm.so.4"),
        _driver_mount(nvml, f"{rhel}/libnvidia-ml.so.1"),
        _driver_mount("usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),
    ]


def test_device_nodes_come_from_the_driver_roots_dev_when_it_has_them() -> None:
    spec = build_spec(_claim(real=True), WITH_DRIVER)
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia1", "hostPath": "/run/nvidia/driver/dev/nvidia1"}
    ]
    assert spec["containerEdits"]["deviceNodes"] == [
        {"path": path, "hostPath": f"/run/nvidia/driver{path}"}
        for path in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
    ]
    on_host = replace(PLAIN, driver_stack=replace(STACK, devices_in_root=False))
    assert (
        build_spec(_claim(real=True), on_host)["containerEdits"]["deviceNodes"]
        == (build_spec(_claim(real=True), PLAIN)["containerEdits"]["deviceNodes"])
    )


def test_mock_gpus_with_a_driver_root_get_the_driver_files_and_no_device_nodes() -> None:
    """The real-node tier: a stand-in driver install, GPUs from the mock list."""
    edits = build_spec(_claim(real=False), WITH_DRIVER)["containerEdits"]
    assert "deviceNodes" not in edits
    assert (
        _driver_mount(f"{LIB}/libcuda.so.{VERSION}", "/usr/lib64/libcuda.so.1") in edits["mounts"]
    )


def test_the_spec_text_with_a_driver_is_deterministic_and_differs_from_one_without() -> None:
    """A spec is its text (the checkpoint keeps it; spec_is_current compares it)."""
    with_driver = spec_text(build_spec(_claim(real=True), WITH_DRIVER))
    assert with_driver == spec_text(
        build_spec(_claim(real=True), replace(PLAIN, driver_stack=STACK))
    )
    assert with_driver != spec_text(build_spec(_claim(real=True), PLAIN))
    assert json.loads(with_driver)["cdiVersion"] == "0.6.0"  # device nodes' hostPath: >= 0.5.0


def test_triton_is_told_where_libcuda_is_only_when_the_spec_carries_it() -> None:
    """Triton finds libcuda with `ldconfig -p`, which knows nothing of our mounts."""
    env = build_spec(_claim(real=True), WITH_DRIVER)["containerEdits"]["env"]
    assert "TRITON_LIBCUDA_PATH=/usr/lib/x86_64-linux-gnu" in env
    plain = build_spec(_claim(real=True), PLAIN)["containerEdits"]["env"]
    assert not any(entry.startswith("TRITON_") for entry in plain)
