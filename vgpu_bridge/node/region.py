"""libvgpu's shared region, as the agent reads it: the one place its layout is written in Python.

libvgpu (native/vgpu/src/region.h, version 1) keeps one region per claim, a file a container can
write (`<vgpu-dir>/claims/<uid>/vgpu.cache`): a header (magic, version, size), up to 16 devices
(uuid, memory and SM limits, allocations refused over the limit) and 1024 process slots (pid in
the container, host pid, start time, last measured SM utilisation, bytes used per device, kernel
launches). A file of another magic, version or size is a
`RegionError`, never guessed at. The metrics collector and the host-pid writer both read it here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from vgpu_bridge.node.files import read_regular

REGION_MAGIC = 0x55504756
REGION_VERSION = 1
MAX_DEVICES = 16
SLOTS = 1024
DEVICES_OFFSET = 64
DEVICE_SIZE = 64
SLOTS_OFFSET = 1088
SLOT_SIZE = 224
REGION_SIZE = SLOTS_OFFSET + SLOTS * SLOT_SIZE
_HEADER = struct.Struct("<IIQ")  # magic, version, size
_COUNTS = struct.Struct("<II")  # ndev, high_water at offset 56
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
    waited on if a FIFO, never read past REGION_SIZE (`files.read_regular`)."""
    return read_region(read_regular(path, max_bytes=REGION_SIZE))


def read_region(data: bytes) -> RegionUsage:
    """Parse a version-1 region (native-endian is little-endian on x86-64 and aarch64)."""
    if len(data) < REGION_SIZE:
        raise RegionError(f"{len(data)} bytes, a version-{REGION_VERSION} region has {REGION_SIZE}")
    magic, version, size = _HEADER.unpack_from(data, 0)
    if magic != REGION_MAGIC or version != REGION_VERSION or size != REGION_SIZE:
        raise RegionError(f"magic {magic:#x} version {version} size {size}: not a v1 region")
    ndev, high_water = _COUNTS.unpack_from(data, 56)
    ndev, high_water = min(ndev, MAX_DEVICES), min(high_water, SLOTS)
    uuids, refused = [], {}
    for d in range(ndev):
        raw_uuid, _, _, refusals = _DEVICE.unpack_from(data, DEVICES_OFFSET + d * DEVICE_SIZE)
        uuids.append(raw_uuid.split(b"\0", 1)[0].decode(errors="replace"))
        refused[uuids[-1]] = refusals
    used = dict.fromkeys(uuids, 0)
    by_process: dict[Process, dict[str, int]] = {}
    processes = launches = sm_util = 0
    for s in range(high_water):
        base = SLOTS_OFFSET + s * SLOT_SIZE
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
