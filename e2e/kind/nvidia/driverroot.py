"""The mock driver root on the host, laid out as NVIDIA's CI lays it out for its kind runs
(``hack/ci/mock-nvml/setup-mock-gpu.sh`` of NVIDIA's plugin; facts in
docs/reference/nvidia-dra-driver.md §5): the mock ``libnvidia-ml`` in ``usr/lib64`` with its
SONAME links, the mock's configuration in ``config/config.yaml`` (where the mock finds it from
the library's own path), a stand-in ``nvidia-smi`` (the plugin only locates it), the device
nodes in ``dev/`` and ``/proc/driver/nvidia`` files.

The configuration is the mock's H100 profile cut to ``GPU_COUNT`` cards whose UUIDs are the ones
the fake CUDA driver of native/vgpu reports for ``/dev/nvidia<N>`` (``uuid_for``), so NVIDIA's
slices, our limits file and the container's CUDA all name the same cards. The root lives at a
fixed host path that kind mounts into the GPU worker at the same path (the CDI specs NVIDIA's
plugin writes name host paths under it); ``remove`` takes it away again.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import yaml

from e2e.kind.nvidia.build import NVML_LIBRARY
from e2e.kind.steps import StepError

HOST_ROOT = Path("/var/lib/vgpu-bridge-nvml-mock")
DRIVER_ROOT = HOST_ROOT / "driver"
GPU_COUNT = 2
PROFILE = Path("pkg/gpu/mocknvml/configs/mock-nvml-config-h100.yaml")
PRODUCT = "NVIDIA H100 80GB HBM3"
CARD_MEMORY = "80Gi"
NVIDIA_MAJOR = 195
UVM_MAJOR = 510
CONTROL_MINOR = 255
_UUID_LINE = re.compile(r'^(\s*uuid:\s*)"?GPU-[0-9a-fA-F-]+"?\s*$')
_INDEX_LINE = re.compile(r"^\s*-\s*index:\s*(\d+)\s*$")
_SYSTEM_LINE = re.compile(r"^system:\s*$")
_STAND_IN_SMI = "#!/bin/sh\n# stand-in: NVIDIA's plugin only locates nvidia-smi\nexit 0\n"


def uuid_for(minor: int) -> str:
    """The UUID the fake CUDA driver reports for ``/dev/nvidia<minor>``."""
    return f"GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae{minor:02x}"


def mock_config(profile: str, count: int = GPU_COUNT) -> str:
    """The mock's profile with ``system.num_devices: count`` and device ``i``'s UUID set to
    ``uuid_for(i)``; edited as text so every other value keeps the profile's spelling (hex ids,
    quoted versions). StepError when the profile lacks a device or its ``system`` block."""
    lines = profile.splitlines()
    out: list[str] = []
    index: int | None = None
    for line in lines:
        if _SYSTEM_LINE.match(line):
            out.extend([line, f"  num_devices: {count}"])
            continue
        found = _INDEX_LINE.match(line)
        if found:
            index = int(found.group(1))
        uuid = _UUID_LINE.match(line)
        if uuid and index is not None and index < count:
            line = f'{uuid.group(1)}"{uuid_for(index)}"'
        out.append(line)
    text = "\n".join(out) + "\n"
    check_config(text, count)
    return text


def check_config(text: str, count: int) -> None:
    """The edited profile reads back with ``count`` devices of the wanted UUIDs."""
    config = yaml.safe_load(text)
    system = config.get("system") or {}
    if system.get("num_devices") != count:
        raise StepError(f"mock profile: system.num_devices is not {count} (no system block?)")
    uuids = {d.get("index"): d.get("uuid") for d in config.get("devices") or []}
    wrong = [i for i in range(count) if uuids.get(i) != uuid_for(i)]
    if wrong:
        raise StepError(f"mock profile: devices {wrong} missing or without a uuid line")


def lay_out(mock_source: Path, nvml: Path, root: Path = DRIVER_ROOT) -> Path:
    """Write the driver root (made afresh); its path."""
    shutil.rmtree(root, ignore_errors=True)
    lib = root / "usr" / "lib64"
    lib.mkdir(parents=True)
    shutil.copyfile(nvml, lib / NVML_LIBRARY)
    (lib / "libnvidia-ml.so.1").symlink_to(NVML_LIBRARY)
    (lib / "libnvidia-ml.so").symlink_to("libnvidia-ml.so.1")
    (root / "config").mkdir()
    (root / "config" / "config.yaml").write_text(mock_config((mock_source / PROFILE).read_text()))
    smi = root / "usr" / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text(_STAND_IN_SMI)
    smi.chmod(0o755)
    make_device_nodes(root / "dev")
    proc = root / "proc" / "driver" / "nvidia"
    proc.mkdir(parents=True)
    version = "550.163.01"
    (proc / "version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  (mock)\n"
    )
    (proc / "params").write_text("ModifyDeviceFiles: 0\n")
    return root


def device_nodes(count: int = GPU_COUNT) -> dict[str, tuple[int, int]]:
    """Name -> (major, minor) of the character devices a driver with ``count`` cards has."""
    nodes = {f"nvidia{i}": (NVIDIA_MAJOR, i) for i in range(count)}
    nodes["nvidiactl"] = (NVIDIA_MAJOR, CONTROL_MINOR)
    nodes["nvidia-uvm"] = (UVM_MAJOR, 0)
    nodes["nvidia-uvm-tools"] = (UVM_MAJOR, 1)
    return nodes


def make_device_nodes(dev: Path) -> None:
    dev.mkdir(parents=True, exist_ok=True)
    for name, (major, minor) in device_nodes().items():
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def remove(root: Path = HOST_ROOT) -> bool:
    """Take the host's mock root away; whether there was one."""
    existed = root.exists()
    shutil.rmtree(root, ignore_errors=True)
    if root.exists():
        raise StepError(f"could not remove {root}")
    return existed
