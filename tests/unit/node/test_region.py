"""Reading libvgpu's shared region (native/vgpu/src/region.h, version 2, and the x86-64-only
version 1 of libvgpu before it): `node/region.py`."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from vgpu_bridge.node.metrics import container_of
from vgpu_bridge.node.region import (
    COUNTS_OFFSET,
    DEVICES_OFFSET,
    LAYOUTS,
    MAX_DEVICES,
    MAX_REGION_SIZE,
    REGION_MAGIC,
    REGION_SIZE,
    REGION_VERSION,
    SLOT_SIZE,
    SLOTS,
    SLOTS_OFFSET,
    Process,
    RegionError,
    read_region,
    read_region_file,
)


def _region(
    *,
    devices: list[str],
    slots: list[tuple[int, list[int], int]],
    high_water: int,
    host_pids: bool = True,
    version: int = REGION_VERSION,
) -> bytes:
    """A region as libvgpu lays it out: header, device table, slots (pid, used[], launches);
    host pid = pid + 1000 (0 without `host_pids`), start time = pid + 500. `version`: the
    layout of that version (1: libvgpu before the 64-byte lock field)."""
    layout = LAYOUTS[version]
    data = bytearray(layout.size)
    struct.pack_into("<IIQ", data, 0, REGION_MAGIC, version, layout.size)
    struct.pack_into("<II", data, layout.counts_offset, len(devices), high_water)
    for d, uuid in enumerate(devices):
        struct.pack_into("<48sQI", data, layout.devices_offset + d * 64, uuid.encode(), 2**30, 30)
    for s, (pid, used, launches) in enumerate(slots):
        base = layout.slots_offset + s * SLOT_SIZE
        host_pid = pid + 1000 if pid and host_pids else 0
        struct.pack_into("<iiQ", data, base, pid, host_pid, pid + 500 if pid else 0)
        struct.pack_into(f"<{len(used)}Q", data, base + 24, *used)
        struct.pack_into("<Q", data, base + 152, launches)
    return bytes(data)


@pytest.mark.parametrize("version", [2, 1], ids=["v2", "v1 (before an upgrade)"])
def test_usage_is_summed_over_live_slots_below_the_high_water_mark(version: int) -> None:
    data = _region(
        devices=["GPU-aaaa", "GPU-bbbb"],
        slots=[(101, [100, 7], 5), (0, [999, 999], 99), (103, [20, 0], 1), (104, [555, 555], 9)],
        high_water=3,  # slot 3 is past the high-water mark: not in use
        version=version,
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


def test_the_layouts_differ_where_the_lock_grew_and_nowhere_else() -> None:
    """Version 1's 40-byte mutex became a 64-byte field: everything after it moved by 24 bytes,
    so a region read with the other version's offsets would be misread, never merely refused."""
    v1, v2 = LAYOUTS[1], LAYOUTS[2]
    assert (v1.counts_offset, v1.devices_offset, v1.slots_offset, v1.size) == (
        56, 64, 1088, 230_464
    )  # fmt: skip
    assert (v2.counts_offset, v2.devices_offset, v2.slots_offset, v2.size) == (
        80, 88, 1112, 230_488
    )  # fmt: skip
    assert REGION_VERSION == 2
    assert REGION_SIZE == MAX_REGION_SIZE == v2.size


def _with_version_field(data: bytes, version: int) -> bytes:
    return data[:4] + struct.pack("<I", version) + data[8:]


def _with_size_field(data: bytes, size: int) -> bytes:
    return data[:8] + struct.pack("<Q", size) + data[16:]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:1000], "a version-2 region has 230488"),
        (lambda b: b[:10], "too short for a region header"),
        (lambda b: b"\0\0\0\0" + b[4:], "not a libvgpu region"),
        (lambda b: _with_version_field(b, 3), "version 3: this agent reads region versions 1, 2"),
        (lambda b: _with_version_field(b, 0), "version 0: this agent reads region versions 1, 2"),
        (lambda b: _with_version_field(b, 1), "a version-1 region has 230464"),  # v2 bytes
        (lambda b: _with_size_field(b, 230_464), "size field 230464 in 230488 bytes"),
        (lambda b: b + b"\0" * 8, "size field 230488 in 230496 bytes"),
    ],
    ids=[
        "short", "no header", "bad magic", "newer version", "version 0",
        "v1 header on v2 bytes", "size field of v1", "longer than its size",
    ],
)  # fmt: skip
def test_a_file_that_is_not_a_region_of_a_known_version_is_refused(
    damage: object, message: str
) -> None:
    data = _region(devices=["GPU-a"], slots=[(101, [5], 1)], high_water=1)
    with pytest.raises(RegionError, match=message):
        read_region(damage(data))  # type: ignore[operator]


def test_a_v2_header_on_a_v1_file_is_refused() -> None:
    v1 = _region(devices=["GPU-a"], slots=[(101, [5], 1)], high_water=1, version=1)
    with pytest.raises(RegionError, match="version 2 with size field 230464 in 230464 bytes"):
        read_region(_with_version_field(v1, 2))


@pytest.mark.parametrize("version", [1, 2])
def test_a_region_file_of_either_version_is_read_from_disk(tmp_path: Path, version: int) -> None:
    path = tmp_path / "vgpu.cache"
    path.write_bytes(
        _region(devices=["GPU-a"], slots=[(7, [64], 3)], high_water=1, version=version)
    )
    usage = read_region_file(path)
    assert (usage.used, usage.processes, usage.launches) == ({"GPU-a": 64}, 1, 3)


def _layout_asserts() -> str:
    """C that compiles only where libvgpu's header lays the region out as this reader expects."""
    checks = {
        "sizeof(struct vgpu_region)": REGION_SIZE,
        "offsetof(struct vgpu_region, ndev)": COUNTS_OFFSET,
        "offsetof(struct vgpu_region, high_water)": COUNTS_OFFSET + 4,
        "offsetof(struct vgpu_region, devices)": DEVICES_OFFSET,
        "offsetof(struct vgpu_region, slots)": SLOTS_OFFSET,
        "sizeof(struct vgpu_region_device)": 64,
        "offsetof(struct vgpu_region_device, refused)": 60,
        "sizeof(struct vgpu_region_slot)": SLOT_SIZE,
        "offsetof(struct vgpu_region_slot, host_pid)": 4,
        "offsetof(struct vgpu_region_slot, start_time)": 8,
        "offsetof(struct vgpu_region_slot, sm_util)": 20,
        "offsetof(struct vgpu_region_slot, used)": 24,
        "offsetof(struct vgpu_region_slot, launches)": 152,
        "VGPU_MAX_DEVICES": MAX_DEVICES,
        "VGPU_REGION_SLOTS": SLOTS,
        "VGPU_REGION_MAGIC": REGION_MAGIC,
        "VGPU_REGION_VERSION": REGION_VERSION,
    }
    lines = ["#include <stddef.h>", '#include "region.h"']
    lines += [f'_Static_assert({expr} == {value}u, "{expr}");' for expr, value in checks.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("compiler", ["cc", "aarch64-linux-gnu-gcc"], ids=["host", "aarch64"])
def test_the_reader_matches_the_layout_libvgpu_compiles(tmp_path: Path, compiler: str) -> None:
    """Compiles native/vgpu's header, for this machine and for aarch64 (Debian's cross gcc): a
    layout change there, or one that differs by architecture, without one here fails this test."""
    path = shutil.which(compiler)
    header_dir = Path(__file__).resolve().parents[3] / "native" / "vgpu" / "src"
    if path is None or not (header_dir / "region.h").exists():
        pytest.skip(f"needs {compiler} and native/vgpu/src/region.h")
    source = tmp_path / "layout.c"
    source.write_text(_layout_asserts())
    compiled = subprocess.run(
        [path, "-std=c11", "-D_GNU_SOURCE", f"-I{header_dir}", "-fsyntax-only", str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert compiled.returncode == 0, compiled.stderr
