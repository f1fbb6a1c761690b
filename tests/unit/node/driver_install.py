"""Driver installs laid out in a tmp dir as the NVIDIA installer and distro packages lay them
out: `<name>.so.<version>` regular files (ELF shared objects with the driver's SONAMEs), the
SONAME and `.so` links beside them, binaries in usr/bin, and /dev nodes faked as files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.unit.node.elf_files import shared_object

VERSION = "555.42.06"
SONAMES = {
    "libcuda": "libcuda.so.1",
    "libnvidia-ml": "libnvidia-ml.so.1",
    "libnvidia-ptxjitcompiler": "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm": "libnvidia-nvvm.so.4",
    "libnvcuvid": "libnvcuvid.so.1",
}


def install_driver(
    root: Path,
    *,
    library_dir: str = "usr/lib/x86_64-linux-gnu",
    machine: str = "x86_64",
    version: str = VERSION,
    sonames: Mapping[str, str] = SONAMES,
    binaries: tuple[str, ...] = ("usr/bin/nvidia-smi", "usr/bin/nvidia-debugdump"),
    device_nodes: bool = False,
) -> Path:
    """A driver install under `root`; its library dir."""
    libraries = root / library_dir
    libraries.mkdir(parents=True, exist_ok=True)
    for name, soname in sonames.items():
        versioned = libraries / f"{name}.so.{version}"
        versioned.write_bytes(shared_object(soname, machine=machine))
        (libraries / soname).symlink_to(versioned.name)
        (libraries / f"{name}.so").symlink_to(soname)
    for binary in binaries:
        (root / binary).parent.mkdir(parents=True, exist_ok=True)
        (root / binary).write_bytes(b"\x7fELF binary")
    if device_nodes:
        (root / "dev").mkdir(exist_ok=True)
        for node in ("nvidiactl", "nvidia-uvm", "nvidia0"):
            (root / "dev" / node).write_bytes(b"")
    return libraries
