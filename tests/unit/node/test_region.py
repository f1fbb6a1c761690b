"""Reading libvgpu's shared region (native/vgpu/src/region.h, version 1): `node/region.py`."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from vgpu_bridge.node.metrics import container_of
from vgpu_bridge.node.region import (
    DEVICES_OFFSET,
    MAX_DEVICES,
    REGION_MAGIC,
    REGION_SIZE,
    REGION_VERSION,
    SLOT_SIZE,
    SLOTS,
    SLOTS_OFFSET,
    Process,
    RegionError,
    read_region,
)


def _region(
    *,
    devices: list[str],
    slots: list[tuple[int, list[int], int]],
    high_water: int,
    host_pids: bool = True,
) -> bytes:
    """A region as libvgpu lays it out: header, device table, slots (pid, used[], launches);
    host pid = pid + 1000 (0 without `host_pids`), start time = pid + 500."""
    data = bytearray(REGION_SIZE)
    struct.pack_into("<IIQ", data, 0, REGION_MAGIC, 1, REGION_SIZE)
    struct.pack_into("<II", data, 56, len(devices), high_water)
    for d, uuid in enumerate(devices):
        struct.pack_into("<48sQI", data, DEVICES_OFFSET + d * 64, uuid.encode(), 2**30, 30)
    for s, (pid, used, launches) in enumerate(slots):
        base = SLOTS_OFFSET + s * SLOT_SIZE
        host_pid = pid + 1000 if pid and host_pids else 0
        struct.pack_into("<iiQ", data, base, pid, host_pid, pid + 500 if pid else 0)
        struct.pack_into(f"<{len(used)}Q", data, base + 24, *used)
        struct.pack_into("<Q", data, base + 152, launches)
    return bytes(data)


def test_usage_is_summed_over_live_slots_below_the_high_water_mark() -> None:
    data = _region(
        devices=["GPU-aaaa", "GPU-bbbb"],
        slots=[(101, [100, 7], 5), (0, [999, 999], 99), (103, [20, 0], 1), (104, [555, 555], 9)],
        high_water=3,  # slot 3 is past the high-water mark: not in use
    )
    usage = read_region(data)
    assert usage.used == {"GPU-aaaa": 120, "GPU-bbbb": 7}
    assert (usage.processes, usage.launches) == (2, 6)
    assert usage.by_process == {
        Process(101, 1101, 601): {"GPU-aaaa": 100, "GPU-bbbb": 7},
        Process(103, 1103, 603): {"GPU-aaaa": 20, "GPU-bbbb": 0},
    }


def test_refusals_per_device_and_the_highest_sm_utilisation_of_live_slots_are_read() -> None:
    data = bytearray(
        _region(
            devices=["GPU-aaaa", "GPU-bbbb"],
            slots=[(101, [1, 0], 0), (0, [0, 0], 0), (103, [0, 2], 0)],
            high_water=3,
        )
    )
    struct.pack_into("<I", data, DEVICES_OFFSET + 60, 7)  # GPU-aaaa: 7 refusals
    for slot, util in ((0, 40), (1, 99), (2, 85)):  # slot 1 is free: its value is stale
        struct.pack_into("<I", data, SLOTS_OFFSET + slot * SLOT_SIZE + 20, util)
    usage = read_region(bytes(data))
    assert usage.refused == {"GPU-aaaa": 7, "GPU-bbbb": 0}
    assert usage.sm_util == 85


def _fake_process(
    proc: Path, host_pid: int, *, ns_pids: str, start: int, cgroup: str, maps: Path | None = None
) -> None:
    """A process in a fake /proc; `maps`: a file it has mapped (as libvgpu maps its region)."""
    directory = proc / str(host_pid)
    directory.mkdir()
    lines = ["7f0000000000-7f0000001000 r-xp 00000000 00:00 0 [vdso]"]
    if maps is not None:
        st = maps.stat()
        device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
        lines.append(f"7f0000002000-7f0000040000 rw-s 00000000 {device} {st.st_ino} /x/vgpu.cache")
    (directory / "maps").write_text("\n".join(lines) + "\n")
    fields = ["S"] + ["0"] * 18 + [str(start)] + ["0"] * 30  # fields 3..52; 22 = starttime
    (directory / "stat").write_text(f"{host_pid} (a (b) c) {' '.join(fields)}\n")
    (directory / "status").write_text(f"Name:\tcuda\nNSpid:\t{ns_pids}\nVmRSS:\t1 kB\n")
    (directory / "cgroup").write_text(cgroup)


def test_a_process_is_attributed_to_the_container_and_pod_its_cgroup_names(
    tmp_path: Path,
) -> None:
    container = "a" * 64
    uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    cgroups = {
        1101: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{uid.replace('-', '_')}.slice/cri-containerd-{container}.scope\n",  # systemd, v2
        1104: f"12:memory:/vgpu-realnode/besteffort/pod{uid}/{container}\n"
        f"0::/vgpu-realnode/besteffort/pod{uid}/{container}\n",  # cgroupfs, hybrid
        1102: "0::/user.slice/session-1.scope\n",
    }
    for pid, text in cgroups.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    assert container_of(1101, tmp_path) == (container, uid)
    assert container_of(1104, tmp_path) == (container, uid)
    assert container_of(1102, tmp_path) == ("", "")  # not in a container
    assert container_of(1199, tmp_path) == ("", "")  # gone
    assert container_of(0, tmp_path) == ("", "")  # libvgpu could not tell


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:1000],
        lambda b: b"\0\0\0\0" + b[4:],
        lambda b: b[:4] + struct.pack("<I", 2) + b[8:],
    ],
    ids=["short", "bad magic", "other version"],
)
def test_a_file_that_is_not_a_v1_region_is_refused(damage: object) -> None:
    data = _region(devices=["GPU-a"], slots=[], high_water=0)
    with pytest.raises(RegionError):
        read_region(damage(data))  # type: ignore[operator]


OFFSETS_PROGRAM = r"""
#include <stddef.h>
#include <stdio.h>
#include "region.h"
int main(void) {
    printf("%zu %zu %zu %zu %zu %zu %zu %zu %zu %d %d %u %u\n", sizeof(struct vgpu_region),
           offsetof(struct vgpu_region, ndev), offsetof(struct vgpu_region, devices),
           offsetof(struct vgpu_region, slots), offsetof(struct vgpu_region_slot, used),
           offsetof(struct vgpu_region_slot, launches), sizeof(struct vgpu_region_slot),
           offsetof(struct vgpu_region_device, refused), offsetof(struct vgpu_region_slot, sm_util),
           VGPU_MAX_DEVICES, VGPU_REGION_SLOTS, VGPU_REGION_MAGIC, VGPU_REGION_VERSION);
    return 0;
}
"""


def test_the_reader_matches_the_layout_libvgpu_compiles(tmp_path: Path) -> None:
    """Compiles native/vgpu's header: a layout change there without one here fails this test."""
    compiler = shutil.which("cc")
    header_dir = Path(__file__).resolve().parents[3] / "native" / "vgpu" / "src"
    if compiler is None or not (header_dir / "region.h").exists():
        pytest.skip("needs a C compiler and native/vgpu/src/region.h")
    source, binary = tmp_path / "offsets.c", tmp_path / "offsets"
    source.write_text(OFFSETS_PROGRAM)
    subprocess.run([compiler, f"-I{header_dir}", str(source), "-o", str(binary)], check=True)
    printed = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    assert [int(v) for v in printed.split()] == [
        REGION_SIZE, 56, DEVICES_OFFSET, SLOTS_OFFSET, 24, 152, SLOT_SIZE, 60, 20,
        MAX_DEVICES, SLOTS, REGION_MAGIC, REGION_VERSION,
    ]  # fmt: skip
