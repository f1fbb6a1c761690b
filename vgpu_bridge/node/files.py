"""The agent's file primitives: atomic writes, bounded reads of files a container can plant, and
removals that stay inside the agent's own directories.

Atomic writes: a temp file in the same directory, fsync, rename, fsync the directory. A reader
sees the old content or the new one, never a half-written file; a failure (full or read-only
disk) leaves the old file as it was and no temp file behind (a kill -9 can leave one: the agent
removes them at start with `remove_temp_files`).

Untrusted reads (`read_regular`): a claim's dir and the node's priority dir are mounted
read-write into containers, which can put a symlink (to /dev/zero, to a host file), a FIFO or a
huge file under any name there. Such files are opened without following a link, without
blocking, checked to be regular, and read up to a size bound; anything else is `UnsafeFile`,
logged once at debug level and counted by reason (`skipped`, exported as a metric).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import threading
from collections import Counter
from pathlib import Path

from vgpu_bridge.logs import get_logger

log = get_logger("vgpu_bridge.node.files")

UNTRUSTED_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeFile(OSError):
    """A file the agent refuses to read: a link, not a regular file, or over its size bound."""


class SkippedFiles:
    """How many untrusted files were refused, by reason (thread-safe)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, reason: str) -> None:
        with self._lock:
            self._counts[reason] += 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


skipped = SkippedFiles()


def read_regular(path: Path, *, max_bytes: int) -> bytes:
    """The content of `path`, a regular file of at most `max_bytes`. FileNotFoundError when
    there is none; `UnsafeFile` (counted) for a symlink, a FIFO, a device, a directory or a
    bigger file. Never follows a link, never blocks, never reads more than `max_bytes` + 1."""
    try:
        fd = os.open(path, UNTRUSTED_OPEN)
    except FileNotFoundError:
        raise
    except OSError as error:  # ELOOP: a symlink; EISDIR, EACCES, ENXIO...
        raise _refuse(path, "symlink" if _is_link(path) else "unreadable", error) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, "not a regular file", f"mode {stat.filemode(mode)}")
        data = os.read(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise _refuse(path, "too big", f"over {max_bytes} bytes")
    return data


def _is_link(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return stat.S_ISLNK(os.lstat(path).st_mode)
    return False


def _refuse(path: Path, reason: str, detail: object) -> UnsafeFile:
    skipped.add(reason)
    log.debug("refused to read an untrusted file", path=str(path), reason=reason,
              detail=str(detail))  # fmt: skip
    return UnsafeFile(f"{path}: {reason} ({detail})")


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True) -> None:
    """Replace `path` with `data`. `durable=False` skips the fsyncs, for files a crash may lose
    (CDI specs on a tmpfs, the checkpoint: both rebuilt); the rename is atomic all the same."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            # the mode by descriptor, never by path: in a directory a container can write (a
            # claim's dir), the temp file's name could be swapped for a symlink to a host file
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    if durable:
        _fsync_dir(path.parent)


def temp_name_pattern(pattern: str) -> re.Pattern[str]:
    """The names `write_atomic` gives its temp files for targets whose name matches `pattern`."""
    return re.compile(rf"\.(?:{pattern})\.[A-Za-z0-9_]+\.tmp")


def remove_temp_files(directory: Path, target: str) -> list[str]:
    """Remove the temp files a killed `write_atomic` left in `directory` for targets whose name
    matches the regular expression `target` (only those: a name the agent never writes stays);
    the names removed. Unlinking a name never follows a link."""
    pattern = temp_name_pattern(target)
    removed: list[str] = []
    try:
        names = [entry.name for entry in os.scandir(directory)]
    except FileNotFoundError:
        return removed
    for name in names:
        if pattern.fullmatch(name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)
                removed.append(name)
    return removed


def remove(path: Path, *, durable: bool = True) -> bool:
    """Remove `path` if it exists; True when it did."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    if durable:
        _fsync_dir(path.parent)
    return True


class OutsideRoot(ValueError):
    """A path the agent was about to delete is not an entry of the directory it owns."""


def check_entry(root: Path, path: Path) -> None:
    """`path` must be a direct entry of `root` (by name: no `..`, no link in between)."""
    if path.parent != root or path.name in ("", ".", "..") or "/" in path.name:
        raise OutsideRoot(f"{path}: not an entry of {root}")
    if os.path.realpath(path.parent) != os.path.realpath(root):
        raise OutsideRoot(f"{path}: {root} resolves elsewhere")


def remove_tree(root: Path, path: Path) -> bool:
    """Remove `path`, a direct entry of `root`, with everything below it; True when it was there.
    Never follows a link: a symlink entry is unlinked, and the walk below is descriptor-based
    (Linux's shutil.rmtree opens each directory with O_NOFOLLOW relative to its parent), so a
    container swapping a directory for a link mid-walk cannot send it outside."""
    check_entry(root, path)
    if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - Linux always has it
        raise OSError("this platform's rmtree follows symlinks; refusing to delete")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(mode):
        os.unlink(path)
        return True
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
    return True


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
