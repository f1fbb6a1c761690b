"""The manifest files a command is pointed at, as kubectl reads them: `-f FILE` (repeatable),
`-f DIR` (the `.yaml`, `.yml` and `.json` files in it; with `-R` in every directory below it,
without following a linked directory) and `-f -` (standard input, once)."""

from __future__ import annotations

import os
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
            yield from (_read(p) for p in found)
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
    if len(data) > MAX_FILE_BYTES:
        raise ManifestError([f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ManifestError([f"{path}: not UTF-8 text (byte {error.start})"]) from None
    return ManifestFile(str(path), path, text)
