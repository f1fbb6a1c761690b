"""The host-pids file: host pids of libvgpu processes that could not tell their own.

libvgpu's SM watcher measures a container by `nvmlDeviceGetProcessUtilization` of its processes'
host pids. A process learns its host pid from `NStgid` in /proc/self/status, which in a pod (own
pid namespace, own /proc) shows only the container pid: the region slot's host pid stays 0 and
the watcher falls back to the whole device's utilisation, neighbours included. The agent, on the
host, finds those processes (`HostPids`: same start time, innermost `NSpid` = slot pid, the
claim's region file mapped) and writes
next to each claim's region `<vgpu-dir>/claims/<uid>/host-pids` (format and reader:
native/vgpu/src/region.h, "Host pids"):

    vgpu-host-pids 1
    <container pid> <start time> <host pid>        one line per resolved slot

`HostPidFiles.sync` runs every `PERIOD_S`: it reads each prepared claim's region, scans /proc
only when a live slot is neither resolved by libvgpu nor by an earlier round (a slot that could
not be found is not looked for again while it lives), and replaces the file only when its
content differs from what the table says. The metrics count each pod's memory by the same
table (`found`), so /proc is searched once, here, not again on every scrape.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import NamedTuple

from vgpu_bridge.atomic_files import write_atomic
from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.cdi import SHARED_REGION_FILE, claim_dir
from vgpu_bridge.node.files import UnsafeFile, read_regular
from vgpu_bridge.node.region import Process, RegionError, read_region_file

log = get_logger("vgpu_bridge.node.hostpids")

FILE = "host-pids"
HEADER = "vgpu-host-pids 1"
PERIOD_S = 1.0  # a new process is measured by its own host pid within about a second
MAX_BYTES = 64 * 1024  # 1024 slots of at most 43 characters each, and the header

Key = tuple[int, int]  # (pid in the container, start time)
#: host pids of slots libvgpu could not tell, by Key (what `HostPidFiles.found` gives)
HostPidTable = Mapping[Key, int]


class FileId(NamedTuple):
    """A file as /proc/<pid>/maps names it, whatever mount namespace maps it: device and inode."""

    major: int
    minor: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> FileId | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return cls(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)


class HostPids:
    """Finds the host pid of a process libvgpu saw only from inside its container: the one whose
    start time matches, whose innermost pid (last `NSpid` entry) is the container pid, and which
    maps the claim's region file (two pods' first processes often share pid 1 and one start tick:
    only the mapping tells them apart). The host's processes are indexed by start time once, on
    the first question."""

    def __init__(self, proc: Path) -> None:
        self._proc = proc
        self._by_start: dict[int, list[int]] | None = None

    def find(self, pid: int, start_time: int, *, maps: FileId) -> int:
        """The host pid, or 0 when no live process matches."""
        if self._by_start is None:
            self._by_start = self._index()
        for host_pid in self._by_start.get(start_time, []):
            directory = self._proc / str(host_pid)
            if _innermost_pid(directory / "status") == pid and _maps_file(directory / "maps", maps):
                return host_pid
        return 0

    def _index(self) -> dict[int, list[int]]:
        index: dict[int, list[int]] = {}
        for entry in self._proc.iterdir():
            if entry.name.isdigit():
                start = _start_time(entry / "stat")
                if start:
                    index.setdefault(start, []).append(int(entry.name))
        return index


def _start_time(stat: Path) -> int:
    """Field 22 of /proc/<pid>/stat (after the parenthesised command name); 0 if unreadable."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return int(fields[19])  # fields[0] is field 3
    except (OSError, IndexError, ValueError):
        return 0


def _maps_file(maps: Path, wanted: FileId) -> bool:
    """Whether a /proc/<pid>/maps lists `wanted` (`addr perms offset MAJ:MIN inode path`)."""
    try:
        text = maps.read_text()
    except OSError:
        return False
    device = f"{wanted.major:02x}:{wanted.minor:02x}"
    inode = str(wanted.inode)
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) >= 5 and fields[4] == inode and fields[3] == device:
            return True
    return False


def _innermost_pid(status: Path) -> int:
    try:
        for line in status.read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return 0


def format_host_pids(table: Mapping[Key, int]) -> bytes:
    """The file for a table of host pids (0 = not found: left out), sorted by pid."""
    lines = [f"{pid} {start} {host}" for (pid, start), host in sorted(table.items()) if host > 0]
    return "\n".join([HEADER, *lines, ""]).encode()


def resolve(
    processes: Iterable[Process], known: Mapping[Key, int], find: Callable[[int, int], int]
) -> dict[Key, int]:
    """Host pids (0 = not found) of the live processes libvgpu could not tell: as `known` has
    them from an earlier round, else from `find(pid, start_time)`."""
    table: dict[Key, int] = {}
    for process in processes:
        if process.host_pid > 0:
            continue
        key = (process.pid, process.start_time)
        table[key] = known[key] if key in known else find(*key)
    return table


def content_to_write(table: Mapping[Key, int], current: bytes | None) -> bytes | None:
    """What to write, or None to leave the file as it is: when it already says this, or when
    there is none and nothing to say."""
    wanted = format_host_pids(table)
    if current == wanted or (current is None and not any(table.values())):
        return None
    return wanted


class HostPidFiles:
    """Keeps every prepared claim's host-pids file in step with its region. `claims` gives the
    prepared claims' uids; `proc` is the host's /proc (the agent runs with hostPID)."""

    def __init__(
        self, claims: Callable[[], Iterable[str]], *, vgpu_dir: Path, proc: Path = Path("/proc")
    ) -> None:
        self._claims = claims
        self._vgpu_dir = vgpu_dir
        self._proc = proc
        self._known: dict[str, dict[Key, int]] = {}
        self._failing: dict[str, str] = {}  # claim uid -> the reason last logged

    def sync(self) -> None:
        """One round over the prepared claims; a claim's failure is logged once, not raised."""
        host_pids = HostPids(self._proc)  # indexes /proc on its first question, if any
        known: dict[str, dict[Key, int]] = {}
        for uid in self._claims():
            directory = claim_dir(self._vgpu_dir, uid)
            try:
                usage = read_region_file(directory / SHARED_REGION_FILE)
            except (OSError, RegionError):  # UnsafeFile (a link, a FIFO...) is an OSError
                continue  # no CUDA process yet, or not a region libvgpu v1 wrote: nothing to do
            region = FileId.of(directory / SHARED_REGION_FILE)
            if region is None:
                continue  # removed since
            find = partial(host_pids.find, maps=region)
            table = resolve(usage.by_process, self._known.get(uid, {}), find)
            known[uid] = table
            data = content_to_write(table, _read_current(directory / FILE))
            try:
                if data is not None:
                    # no fsync: the file is rewritten within a second of being lost
                    write_atomic(directory / FILE, data, durable=False)
            except OSError as error:
                reason = error.strerror or str(error)  # without the temp file's random name
                if self._failing.get(uid) != reason:
                    log.warning("cannot write host pids", claim_uid=uid, error=str(error))
                self._failing[uid] = reason
            else:
                self._failing.pop(uid, None)
        self._known = known

    def found(self, claim_uid: str) -> Mapping[Key, int]:
        """The host pids the last round found for the claim's slots (0: not found), for the
        metrics; the same table the claim's file says."""
        return self._known.get(claim_uid, {})


def _read_current(path: Path) -> bytes | None:
    """The file's content; None when there is none, b"" when it is not a regular file we may
    read (a container may have put a symlink or a FIFO there: replaced, never followed)."""
    try:
        return read_regular(path, max_bytes=MAX_BYTES)
    except FileNotFoundError:
        return None
    except (UnsafeFile, OSError):
        return b""
