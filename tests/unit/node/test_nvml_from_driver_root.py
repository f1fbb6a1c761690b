"""NVML from the driver root: with --driver-root and no mock GPUs, the agent loads the root's
libnvidia-ml before pynvml does (its image has none), so NVML lists the node's cards. Loading
a library into a process cannot be undone: each case that loads one runs a fresh interpreter,
over native/vgpu's fake NVML laid out as a driver install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.node.driver_install import VERSION
from tests.unit.node.fake_driver import fake_library
from vgpu_bridge.node.driver_root import DriverRootError, nvml_library

LIB = "usr/lib/x86_64-linux-gnu"
MACHINE = os.uname().machine
TRIPLET_LIB = f"usr/lib/{MACHINE}-linux-gnu"
LIST_GPUS = """
import json, sys
from pathlib import Path
from vgpu_bridge.node.driver_root import preload_nvml
from vgpu_bridge.node.gpus import GpuDiscoveryError, nvml_gpus
if sys.argv[1] != "-":
    preload_nvml(Path(sys.argv[1]), machine=sys.argv[2])
try:
    print(json.dumps([[g.uuid, g.driver_version] for g in nvml_gpus()]))
except GpuDiscoveryError as error:
    print(json.dumps(str(error)))
"""
# serve() as the node command runs it, stopped where it waits for NVML's GPUs: it looks, the
# driver root is filled (GPU Operator's driver container comes up), it looks again
SERVE_UNTIL_THE_WAIT = """
import json, os, shutil, sys
from vgpu_bridge import cli
from vgpu_bridge.node import app
from vgpu_bridge.node.no_gpu import why_no_gpus

def look_twice(find, **_kwargs):
    looks = []
    for fill in os.environ.get("FILL_AFTER_FIRST_LOOK", "").split(";"):
        gpus, reason = why_no_gpus(find)
        looks.append(reason or [g.uuid for g in gpus])
        if fill:
            source, target = fill.split("=")
            shutil.copyfile(source, target)
    print(json.dumps(looks))
    raise OSError("stopped where the agent waits for GPUs")

app.wait_for_gpus = look_twice
sys.exit(cli.main(["node", "--node-name", "n", "--metrics-listen", "", *sys.argv[1:]]))
"""


def _fake_nvml_install(root: Path) -> Path:
    """The fake NVML as a driver installs libnvidia-ml: versioned file, SONAME link."""
    libraries = root / TRIPLET_LIB
    libraries.mkdir(parents=True)
    versioned = libraries / f"libnvidia-ml.so.{VERSION}"
    versioned.write_bytes(fake_library("libnvidia-ml.so.1").read_bytes())
    (libraries / "libnvidia-ml.so.1").symlink_to(versioned.name)
    return versioned


def _python(script: str, *args: str, fill: str = "") -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("LD_")}
    environ |= {"FAKE_CUDA_DEVICES": "2", "FAKE_NVML_DRIVER_VERSION": VERSION,
                "FILL_AFTER_FIRST_LOOK": fill}  # fmt: skip
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          env=environ, check=False)  # fmt: skip


def test_pynvml_lists_the_cards_through_the_driver_roots_library(tmp_path: Path) -> None:
    _fake_nvml_install(tmp_path)
    listed = json.loads(_python(LIST_GPUS, str(tmp_path), MACHINE).stdout)
    assert len(listed) == 2
    assert all(uuid.startswith("GPU-") and version == VERSION for uuid, version in listed)
    without = json.loads(_python(LIST_GPUS, "-").stdout)  # the agent's image has no NVML
    assert isinstance(without, str)
    assert without.startswith("NVML is unavailable")


def _looks(done: subprocess.CompletedProcess[str]) -> list[object]:
    assert "stopped where the agent waits for GPUs" in done.stderr, done.stderr
    looks: list[object] = json.loads(done.stdout.splitlines()[-1])
    return looks


def test_the_agent_loads_nvml_from_the_driver_root_before_it_looks_for_gpus(
    tmp_path: Path,
) -> None:
    mount = tmp_path / "driver-root"
    _fake_nvml_install(mount)
    args = ["--driver-root", "/run/nvidia/driver", "--driver-root-mount", str(mount)]
    [listed] = _looks(_python(SERVE_UNTIL_THE_WAIT, *args))
    assert isinstance(listed, list)
    assert len(listed) == 2


def test_a_driver_root_filled_after_the_start_is_loaded_at_the_next_look(tmp_path: Path) -> None:
    """GPU Operator's driver container installs the driver after the agent started: the agent
    waits saying why, then loads NVML from the root once it is there."""
    mount = tmp_path / "driver-root"
    versioned = _fake_nvml_install(mount)
    kept = versioned.rename(tmp_path / "later")
    done = _python(SERVE_UNTIL_THE_WAIT, "--driver-root", str(mount),
                   fill=f"{kept}={versioned};")  # fmt: skip
    first, second = _looks(done)
    assert isinstance(first, str)
    assert first.startswith(f"driver root {mount}: no libnvidia-ml.so.1 nor")
    assert isinstance(second, list)
    assert len(second) == 2


def test_the_soname_link_names_the_library_to_load(tmp_path: Path) -> None:
    libraries = tmp_path / LIB
    libraries.mkdir(parents=True)
    for version in ("550.54.15", VERSION):
        (libraries / f"libnvidia-ml.so.{version}").write_bytes(b"\x7fELF")
    (libraries / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.550.54.15")
    assert nvml_library(tmp_path, machine="x86_64") == libraries / "libnvidia-ml.so.550.54.15"


@pytest.mark.parametrize("link", [None, "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.999.1.1"])
def test_without_a_usable_soname_link_the_highest_version_is_taken(
    tmp_path: Path, link: str | None
) -> None:
    """An absolute link would resolve in this process's filesystem, not the root's: ignored."""
    libraries = tmp_path / LIB
    libraries.mkdir(parents=True)
    for version in ("550.54.15", VERSION, "9.1"):
        (libraries / f"libnvidia-ml.so.{version}").write_bytes(b"\x7fELF")
    (libraries / "libnvidia-ml.so.1000.1.1").symlink_to("libnvidia-ml.so.9.1")  # a link: no
    if link is not None:
        (libraries / "libnvidia-ml.so.1").symlink_to(link)
    assert nvml_library(tmp_path, machine="x86_64") == libraries / f"libnvidia-ml.so.{VERSION}"


def test_no_nvml_under_the_root_names_the_dirs_looked_in(tmp_path: Path) -> None:
    (tmp_path / "usr/lib64").mkdir(parents=True)
    with pytest.raises(DriverRootError, match=r"no libnvidia-ml\.so\.1 .* in any of usr/lib/x86"):
        nvml_library(tmp_path, machine="x86_64")
