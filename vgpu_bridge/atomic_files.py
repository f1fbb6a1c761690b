"""Atomic file replacement, for every part that writes a file someone else reads: a temp file in
the same directory, fsync, rename, fsync the directory. A reader sees the old content or the new
one, never a half-written file; a failure (full or read-only disk) leaves the old file as it was
and no temp file behind (a kill -9 can leave one, named `.<name>.<random>.tmp`)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


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
        fsync_dir(path.parent)


def holds(path: Path, data: bytes, mode: int) -> bool:
    """Whether `path` is already a regular file with exactly `data` and `mode` (read without
    following a link, nor waiting at a FIFO's open): an installer leaves it alone, so running
    readers keep their inode."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size != len(data):  # a dir in the way, too
        os.close(fd)
        return False
    with os.fdopen(fd, "rb") as handle:
        return stat.S_IMODE(info.st_mode) == mode and handle.read(len(data) + 1) == data


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
