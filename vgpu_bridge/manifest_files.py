"""The manifest files a command is pointed at, as kubectl reads them: `-f FILE` (repeatable),
`-f DIR` (the `.yaml`, `.yml` and `.json` files in it; with `-R` in every directory below it,
without following a linked directory) and `-f -` (standard input, once).

A directory's files are read only when they are regular files inside its tree: a tree may come
from someone else (a repository, a tenant's upload), and a link in it to a kubeconfig printed
its token, a link to /dev/stdin or a FIFO made the command wait forever. A link that stays inside
the tree is read, as kubectl reads it; one that leads out of it, and any FIFO, socket or device,
is refused by name, never opened for reading. A path the user names with `-f` is read as given
(`-f <(helm template ...)` is a pipe on purpose)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from vgpu_bridge.manifests import ManifestError

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE_BYTES = 32 << 20  # a manifest file bigger than this is refused, not read
STDIN = "-"


class FileProblem(Exception):
    """A file or directory that cannot be read as asked (a usage error); the message names it.
    A file that can be read but holds no manifest text is a `ManifestError`."""


@dataclass(frozen=True, slots=True)
class ManifestFile:
    """A manifest's text and where it came from (`path` is None for standard input)."""

    name: str
    path: Path | None
    text: str

    @property
    def is_json(self) -> bool:
        return self.path is not None and self.path.suffix == ".json"


def manifest_files(
    names: Sequence[str], *, recursive: bool, stdin: TextIO
) -> Iterator[ManifestFile]:
    """The files `names` stand for, in order; a directory's files sorted by path."""
    if list(names).count(STDIN) > 1:
        raise FileProblem("-f -: standard input can be read once")
    for name in names:
        if name == STDIN:
            yield ManifestFile("<stdin>", None, stdin.read())
            continue
        path = Path(name)
        if path.is_dir():
            found = sorted(_manifests_in(path, recursive=recursive))
            if not found:
                deep = " (or below it)" if recursive else " (-R reads the directories below it)"
                raise FileProblem(f"{name}: no {', '.join(MANIFEST_SUFFIXES)} files in it{deep}")
            root = Path(os.path.realpath(path))
            yield from (_read_in_tree(p, root=root) for p in found)
        else:
            yield _read(path)


def _manifests_in(directory: Path, *, recursive: bool) -> Iterator[Path]:
    for root, dirs, files in os.walk(directory, onerror=_raise):
        dirs.sort()
        if not recursive:
            dirs.clear()
        yield from (Path(root) / f for f in files if f.endswith(MANIFEST_SUFFIXES))


def _raise(error: OSError) -> None:
    raise FileProblem(f"{error.filename}: cannot read: {error.strerror}")


def _read(path: Path) -> ManifestFile:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise FileProblem(f"{path}: cannot read: {error.strerror}") from None
    return _decoded(path, data)


# O_NONBLOCK: a FIFO put in place after the checks opens at once instead of waiting for a writer.
_TREE_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _read_in_tree(path: Path, *, root: Path) -> ManifestFile:
    """`path`, found in the directory whose real path is `root`, if it is a regular file there."""
    target = Path(os.path.realpath(path))
    if not target.is_relative_to(root):
        raise FileProblem(f"{path}: a link to {target}, outside {root}: not read")
    try:
        _refuse_unless_regular(path, os.lstat(target).st_mode)
        descriptor = os.open(target, _TREE_OPEN)
    except OSError as error:
        raise FileProblem(f"{path}: cannot read: {error.strerror}") from None
    try:
        _refuse_unless_regular(path, os.fstat(descriptor).st_mode)
        _refuse_unless_inside(path, descriptor, root=root)
        data = _read_at_most(descriptor, MAX_FILE_BYTES + 1)
    except OSError as error:
        raise FileProblem(f"{path}: cannot read: {error.strerror}") from None
    finally:
        os.close(descriptor)
    return _decoded(path, data)


_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a link",
}


def _refuse_unless_regular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "not a file")
        raise FileProblem(f"{path}: {kind}, not a regular file: not read")


def _refuse_unless_inside(path: Path, descriptor: int, *, root: Path) -> None:
    """What was opened, as the kernel names it: a directory of the tree swapped for a link
    between the checks and the open would show here (where /proc is there to ask)."""
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{descriptor}"))
    except OSError:
        return
    if not opened.is_relative_to(root):
        raise FileProblem(f"{path}: changed to a link to {opened}, outside {root}: not read")


def _read_at_most(descriptor: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0 and (chunk := os.read(descriptor, min(left, 1 << 20))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _decoded(path: Path, data: bytes) -> ManifestFile:
    if len(data) > MAX_FILE_BYTES:
        raise ManifestError([f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ManifestError([f"{path}: not UTF-8 text (byte {error.start})"]) from None
    return ManifestFile(str(path), path, text)
