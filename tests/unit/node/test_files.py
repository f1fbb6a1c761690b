"""Atomic writes: the old content or the new one, never a temp file left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vgpu_bridge.node.files import remove, write_atomic


@pytest.mark.parametrize("durable", [True, False])
def test_a_write_replaces_the_file_whole_with_its_mode(tmp_path: Path, durable: bool) -> None:
    path = tmp_path / "f.json"
    path.write_text("old")
    write_atomic(path, b"new", mode=0o600, durable=durable)
    assert path.read_bytes() == b"new"
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_a_failed_write_keeps_the_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_text("old")
    with pytest.raises(TypeError):
        write_atomic(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_remove_says_whether_there_was_a_file(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_text("x")
    assert remove(path) is True
    assert remove(path) is False


def test_the_mode_is_set_on_the_descriptor_never_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a directory a container can write, a path-based chmod of the temp file could be sent
    through a symlink swapped in under its name: write_atomic never chmods by path."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"chmod by path: {args}")

    monkeypatch.setattr(os, "chmod", refuse)
    target = tmp_path / "host-pids"
    write_atomic(target, b"data\n", mode=0o640, durable=False)
    assert target.read_bytes() == b"data\n"
    assert target.stat().st_mode & 0o777 == 0o640
