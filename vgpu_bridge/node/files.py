"""The agent's file primitives: atomic writes, bounded reads of files a container can plant, and
removals that stay inside the agent's own directories.

Atomic writes are `vgpu_bridge.atomic_files.write_atomic`; a kill -9 can leave a temp file
behind, which the agent removes at start with `remove_temp_files`.

Untrusted reads (`read_regular`): a claim's dir and the node's priority dir are mounted
read-write into containers, which can put a symlink (to /dev/zero, to a host file), a FIFO or a
huge file under any name there. Such files are opened without following a link, without
blocking, checked to be regular, and read up to a size bound; anything else is `UnsafeFile`,
logged once at debug level and counted by reason (`skipped`, exported as a metric).

Removals (`remove_tree`) delete only direct entries of the agent's own directories, and what is
below them without recursion and without following a link: however deep the tree a container
made, at most three directories are open at once (`_TreeRemoval`). An entry that cannot be
removed is counted by errno (`not_deleted`, a metric) and logged; the rest goes all the same.
A removal may be given a `RemovalBudget` (operations and seconds): past it, the walk stops where
it is and the rest stays in place for the next pass, so that a tree a tenant planted never holds
a caller (the sweep, Unprepare) for long. What a pass costs is the filesystem's: each directory
removed frees a block, which on ext4 mounted with `discard` takes 1-2 ms (`rm -rf` pays the same);
the walk itself costs about 45 us a directory (tmpfs).
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import secrets
import stat
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from pathlib import Path

from vgpu_bridge.atomic_files import fsync_dir
from vgpu_bridge.logs import get_logger

log = get_logger("vgpu_bridge.node.files")

UNTRUSTED_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: a directory below one the agent deletes: never through a link, never a FIFO's open
UNTRUSTED_DIR_OPEN = UNTRUSTED_OPEN | os.O_DIRECTORY


class UnsafeFile(OSError):
    """A file the agent refuses to read: a link, not a regular file, or over its size bound."""


class CountsByReason:
    """How many files were refused, or could not be deleted, by reason (thread-safe)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, reason: str) -> None:
        with self._lock:
            self._counts[reason] += 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


skipped = CountsByReason()  # untrusted files refused, by reason
not_deleted = CountsByReason()  # entries below a removed tree left in place, by errno name


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
        fsync_dir(path.parent)
    return True


class OutsideRoot(ValueError):
    """A path the agent was about to delete is not an entry of the directory it owns."""


def check_entry(root: Path, path: Path) -> None:
    """`path` must be a direct entry of `root` (by name: no `..`, no link in between)."""
    if path.parent != root or path.name in ("", ".", "..") or "/" in path.name:
        raise OutsideRoot(f"{path}: not an entry of {root}")
    if os.path.realpath(path.parent) != os.path.realpath(root):
        raise OutsideRoot(f"{path}: {root} resolves elsewhere")


class RemovalBudget:
    """What one pass of removals may do: at most `operations` (each unlink, rmdir or rename of
    an entry counts one) and `seconds` (on `clock`); once either is spent the walk stops where it
    is, whatever remains stays in place, and `exhausted` is True. One budget may serve several
    removals: a pass of the sweep, one Unprepare call."""

    def __init__(
        self, *, operations: int, seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.left = operations
        self.spent = 0
        self._clock = clock
        self._deadline = clock() + seconds

    @property
    def exhausted(self) -> bool:
        return self.left <= 0 or self._clock() >= self._deadline

    def spend(self) -> None:
        self.left -= 1
        self.spent += 1


def remove_tree(root: Path, path: Path, *, budget: RemovalBudget | None = None) -> bool:
    """Remove `path`, a direct entry of `root`, with everything below it; True when it was there.
    Never follows a link: a symlink entry is unlinked, and the walk below is descriptor-based
    (`_TreeRemoval`), so a container swapping a directory for a link mid-walk cannot send it
    outside. What cannot be removed (`path` included) is counted in `not_deleted` and logged,
    never raised: the rest goes all the same. With a `budget`, the walk stops once it is spent
    and `path` stays with what is left (a later call goes on). Raises `OutsideRoot`, or OSError
    when `root` cannot be read."""
    check_entry(root, path)
    parent = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return False
        failed = _TreeRemoval(parent, path.name, budget).run()
    finally:
        os.close(parent)
    if failed:
        log.warning("entries of a removed directory could not be deleted", path=str(path),
                    not_deleted=failed)  # fmt: skip
    return True


class _TreeRemoval:
    """Removes the entry `name` of the directory open at `parent` without recursion: a file or
    a link is unlinked; in a directory (the tree's top), each entry that is a directory has its
    own entries moved up into the top (a rename between two descriptors: they never leave the
    tree) and is then removed, empty. Each entry moves at most once, so the work is linear in
    the tree's size, and at most three directories are open at once whatever the tree's depth
    (no recursion limit, no descriptor limit). An entry that cannot be removed is counted, and
    the walk goes on. Once the budget is spent (`stopped`), nothing more is touched: the top
    keeps what is left (moved-up entries included) for the next pass."""

    def __init__(self, parent: int, name: str, budget: RemovalBudget | None = None) -> None:
        self._parent = parent
        self._name = name
        self._budget = budget
        self._fresh_names = _fresh_names()
        self.failed = 0

    @property
    def stopped(self) -> bool:
        return self._budget is not None and self._budget.exhausted

    def run(self) -> int:
        """Remove the entry; how many entries (it included) could not be removed."""
        try:
            self._remove(self._parent, self._name, self._empty)
        except OSError as error:
            self._count(error)
        return self.failed

    def _empty(self, top: int) -> None:
        pending = deque(os.listdir(top))
        while pending and not self.stopped:
            name = pending.popleft()
            try:
                self._remove(top, name, lambda below: pending.extend(self._move_up(below, top)))
            except OSError as error:
                self._count(error)

    def _remove(self, parent: int, name: str, empty: Callable[[int], None]) -> None:
        """Unlink `name` in `parent`; if it is a directory, open it (never through a link),
        `empty` it by its descriptor and remove it, unless the budget ran out meanwhile. A name
        already gone is fine."""
        with contextlib.suppress(FileNotFoundError):
            try:
                os.unlink(name, dir_fd=parent)
            except IsADirectoryError:
                self._remove_directory(parent, name, empty)
            else:
                self._spend()

    def _remove_directory(self, parent: int, name: str, empty: Callable[[int], None]) -> None:
        directory = _open_directory(parent, name)
        if directory is None:  # swapped for a link or a file since: unlink that
            os.unlink(name, dir_fd=parent)
            self._spend()
            return
        try:
            empty(directory)
        finally:
            os.close(directory)
        if not self.stopped:
            os.rmdir(name, dir_fd=parent)
            self._spend()

    def _move_up(self, directory: int, top: int) -> list[str]:
        """Move the entries of `directory` into `top` under fresh names (until the budget is
        spent); those names."""
        moved = []
        for name in os.listdir(directory):
            if self.stopped:
                break
            fresh = next(self._fresh_names)
            try:
                os.rename(name, fresh, src_dir_fd=directory, dst_dir_fd=top)
            except FileNotFoundError:
                continue
            except OSError as error:
                self._count(error)
                continue
            self._spend()
            moved.append(fresh)
        return moved

    def _spend(self) -> None:
        if self._budget is not None:
            self._budget.spend()

    def _count(self, error: OSError) -> None:
        self.failed += 1
        reason = errno.errorcode.get(error.errno or 0, type(error).__name__)
        not_deleted.add(reason)
        log.debug("could not delete an entry", error=str(error), reason=reason)


def _open_directory(parent: int, name: str) -> int | None:
    """A descriptor of the directory `name` in `parent`; None when it is no directory (a link
    swapped in: O_NOFOLLOW refuses it, never follows it)."""
    try:
        return os.open(name, UNTRUSTED_DIR_OPEN, dir_fd=parent)
    except NotADirectoryError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            return None
        raise


def _fresh_names() -> Iterator[str]:
    """Names for the entries `_TreeRemoval` moves up, unlike any a container would guess."""
    token = secrets.token_hex(8)
    return (f".vgpu-bridge-deleting.{token}.{n}" for n in itertools.count())
