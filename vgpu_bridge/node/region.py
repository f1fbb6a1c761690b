"""libvgpu's shared region, as the agent reads it: the one place its layout is written in Python.

libvgpu (native/vgpu/src/region.h) keeps one region per claim, a file a container can write
(`<vgpu-dir>/claims/<uid>/vgpu.cache`): a header (magic, version, size), a lock, up to 16 devices
(uuid, memory and SM limits, allocations refused over the limit) and 1024 process slots (pid in
the container, host pid, start time, last measured SM utilisation, bytes used per device, kernel
launches). Version 2 keeps the lock in a fixed 64-byte field, so its layout is the same on x86-64
and aarch64; version 1 (x86-64 libvgpu before it: a bare 40-byte mutex) is still read, with its
own offsets, for containers that started before an upgrade and keep the old library. A file of
another magic or version, or whose size is not its version's, is a `RegionError`, never guessed
at. The metrics collector and the host-pid writer both read it here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from vgpu_bridge.node.files import read_regular

REGION_MAGIC = 0x55504756
MAX_DEVICES = 16
SLOTS = 1024
DEVICE_SIZE = 64
SLOT_SIZE = 224


class Layout(NamedTuple):
    """Where a region version keeps what the agent reads (devices and slots are alike in all)."""

    version: int
    counts_offset: int  # u32 ndev, u32 high_water
    devices_offset: int
    slots_offset: int

    @property
    def size(self) -> int:
        return self.slots_offset + SLOTS * SLOT_SIZE


LAYOUTS = {
    1: Layout(1, counts_offset=56, devices_offset=64, slots_offset=1088),  # 40-byte mutex
    2: Layout(2, counts_offset=80, devices_offset=88, slots_offset=1112),  # 64-byte lock field
}
REGION_VERSION = 2  # what libvgpu writes now
COUNTS_OFFSET = LAYOUTS[REGION_VERSION].counts_offset
DEVICES_OFFSET = LAYOUTS[REGION_VERSION].devices_offset
SLOTS_OFFSET = LAYOUTS[REGION_VERSION].slots_offset
REGION_SIZE = LAYOUTS[REGION_VERSION].size
MAX_REGION_SIZE = max(layout.size for layout in LAYOUTS.values())
_HEADER = struct.Struct("<IIQ")  # magic, version, size
_COUNTS = struct.Struct("<II")  # ndev, high_water at the layout's counts_offset
_DEVICE = struct.Struct("<48sQII")  # uuid, mem_limit, sm_limit, refused
_SLOT_PIDS = struct.Struct("<iiQ")  # pid in the container, host pid, start time
_SM_UTIL = struct.Struct("<I")  # at slot offset 20: container SM percent this process measured
_USED = struct.Struct(f"<{MAX_DEVICES}Q")  # at slot offset 24
_LAUNCHES = struct.Struct("<Q")  # at slot offset 152


class RegionError(ValueError):
    """Not a region file this agent can read."""


class Process(NamedTuple):
    """A region slot's owner: its pid in the container, its host pid (0 where libvgpu could not
    tell: a container's /proc shows only its own pid namespace), its start time (clock ticks)."""

    pid: int
    host_pid: int
    start_time: int


@dataclass(frozen=True)
class RegionUsage:
    """A shared region's totals: bytes used per GPU uuid, live processes, kernel launches;
    bytes per uuid of each live process; allocations refused per uuid (a 32-bit counter that
    wraps); the highest SM utilisation (percent) a live process last measured for its container."""

    used: dict[str, int]
    processes: int
    launches: int
    by_process: dict[Process, dict[str, int]]
    refused: dict[str, int] = field(default_factory=dict)
    sm_util: int = 0


def read_region_file(path: Path) -> RegionUsage:
    """The region in `path`, a file a container can replace: never followed if a link, never
    waited on if a FIFO, never read past the largest region size (`files.read_regular`)."""
    return read_region(read_regular(path, max_bytes=MAX_REGION_SIZE))


def _layout(data: bytes) -> Layout:
    """The layout of the region in `data`, from its header; `RegionError` if it is not one."""
    if len(data) < _HEADER.size:
        raise RegionError(f"{len(data)} bytes: too short for a region header")
    magic, version, size = _HEADER.unpack_from(data, 0)
    if magic != REGION_MAGIC:
        raise RegionError(f"magic {magic:#x}: not a libvgpu region")
    layout = LAYOUTS.get(version)
    if layout is None:
        known = ", ".join(str(v) for v in LAYOUTS)
        raise RegionError(f"version {version}: this agent reads region versions {known}")
    if size != layout.size or len(data) != layout.size:
        raise RegionError(
            f"version {version} with size field {size} in {len(data)} bytes: "
            f"a version-{version} region has {layout.size}"
        )
    return layout


def read_region(data: bytes) -> RegionUsage:
    """Parse a region of any version in LAYOUTS (native-endian is little-endian on x86-64 and
    aarch64)."""
    layout = _layout(data)
    ndev, high_water = _COUNTS.unpack_from(data, layout.counts_offset)
    ndev, high_water = min(ndev, MAX_DEVICES), min(high_water, SLOTS)
    uuids, refused = [], {}
    for d in range(ndev):
        raw_uuid, _, _, refusals = _DEVICE.unpack_from(
            data, layout.devices_offset + d * DEVICE_SIZE
        )
        uuids.append(raw_uuid.split(b"\0", 1)[0].decode(errors="replace"))
        refused[uuids[-1]] = refusals
    used = dict.fromkeys(uuids, 0)
    by_process: dict[Process, dict[str, int]] = {}
    processes = launches = sm_util = 0
    for s in range(high_water):
        base = layout.slots_offset + s * SLOT_SIZE
        pid, host_pid, start_time = _SLOT_PIDS.unpack_from(data, base)
        if pid == 0:
            continue
        processes += 1
        per_device = _USED.unpack_from(data, base + 24)
        owner = Process(pid, max(host_pid, 0), start_time)
        mine = by_process.setdefault(owner, dict.fromkeys(uuids, 0))
        for d, uuid in enumerate(uuids):
            used[uuid] += per_device[d]
            mine[uuid] += per_device[d]
        launches += _LAUNCHES.unpack_from(data, base + 152)[0]
        sm_util = max(sm_util, min(_SM_UTIL.unpack_from(data, base + 20)[0], 100))
    return RegionUsage(used, processes, launches, by_process, refused, sm_util)
