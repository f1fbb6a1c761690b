"""The agent's file primitives: atomic writes (the old content or the new one, never a temp file
left behind), bounded reads of files a container can plant, deletes inside our own dirs only."""

from __future__ import annotations

import os
import resource
import shutil
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from vgpu_bridge.atomic_files import holds, write_atomic
from vgpu_bridge.node.files import (
    OutsideRoot,
    UnsafeFile,
    read_regular,
    remove,
    remove_temp_files,
    remove_tree,
    skipped,
    temp_name_pattern,
)


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


# --- files a container can plant: read_regular ----------------------------------------------

LIMIT = 4096


def _read_in_thread(
    path: Path, reader: Callable[[Path], object] | None = None
) -> tuple[bool, object]:
    """Read `path` in a thread: whether the read finished (a generous 10 s: a read that blocks
    on a FIFO or streams /dev/zero never does) and what it gave or raised."""
    outcome: list[object] = []
    read_path = reader or partial(read_regular, max_bytes=LIMIT)

    def read() -> None:
        try:
            outcome.append(read_path(path))
        except OSError as error:
            outcome.append(error)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout=10)
    return not thread.is_alive(), outcome[0] if outcome else None


def test_a_symlink_to_dev_zero_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "vgpu.cache"
    path.symlink_to("/dev/zero")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finished, outcome = _read_in_thread(path)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert finished
    assert isinstance(outcome, UnsafeFile)
    assert "symlink" in str(outcome)
    assert grown_kib < 32 * 1024  # the agent's size is not the tenant's to choose


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "vgpu.cache"
    os.mkfifo(path)
    finished, outcome = _read_in_thread(path)
    assert finished
    assert isinstance(outcome, UnsafeFile)
    assert "not a regular file" in str(outcome)


def test_holds_only_a_regular_file_of_the_same_bytes_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "libvgpu.so"
    write_atomic(path, b"elf", mode=0o644)
    assert holds(path, b"elf", 0o644)
    assert not holds(path, b"elf", 0o755)
    assert not holds(path, b"elf!", 0o644)
    assert not holds(tmp_path / "missing", b"elf", 0o644)
    (tmp_path / "link").symlink_to(path)
    assert not holds(tmp_path / "link", b"elf", 0o644)  # the link is not followed


def test_holds_answers_no_for_a_fifo_without_waiting_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "libvgpu.so"
    os.mkfifo(path, 0o644)
    finished, outcome = _read_in_thread(path, lambda p: holds(p, b"", 0o644))
    assert finished
    assert outcome is False


def test_a_file_over_the_bound_is_refused_and_read_no_further(tmp_path: Path) -> None:
    path = tmp_path / "vgpu.cache"
    with path.open("wb") as handle:
        handle.truncate(8 * 2**30)  # 8 GiB, sparse
    finished, outcome = _read_in_thread(path)
    assert finished
    assert isinstance(outcome, UnsafeFile)
    assert "too big" in str(outcome)


@pytest.mark.parametrize("kind", ["directory", "symlink to a regular file"])
def test_other_things_are_refused_and_counted(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "vgpu.cache"
    if kind == "directory":
        path.mkdir()
    else:
        (tmp_path / "host-file").write_text("secret")
        path.symlink_to(tmp_path / "host-file")
    before = sum(skipped.counts().values())
    with capture_logs() as logs, pytest.raises(UnsafeFile):
        read_regular(path, max_bytes=LIMIT)
    assert sum(skipped.counts().values()) == before + 1
    assert [e["event"] for e in logs] == ["refused to read an untrusted file"]


def test_a_regular_file_within_the_bound_is_read_and_a_missing_one_is_not_found(
    tmp_path: Path,
) -> None:
    path = tmp_path / "vgpu.cache"
    path.write_bytes(b"x" * LIMIT)
    assert read_regular(path, max_bytes=LIMIT) == b"x" * LIMIT
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "none", max_bytes=LIMIT)


# --- what a kill -9 left, and deletes inside our own dirs -----------------------------------


def test_temp_files_of_a_killed_write_are_removed_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.json").write_text("{}")
    (tmp_path / ".checkpoint.json.a1b2_c3.tmp").write_text("half")
    (tmp_path / ".other.json.a1b2c3.tmp").write_text("not ours")
    (tmp_path / ".checkpoint.json.a1b2c3.tmp.keep").write_text("not a temp name")
    assert remove_temp_files(tmp_path, r"checkpoint\.json") == [".checkpoint.json.a1b2_c3.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".checkpoint.json.a1b2c3.tmp.keep",
        ".other.json.a1b2c3.tmp",
        "checkpoint.json",
    ]


def test_a_write_killed_midway_leaves_a_temp_name_the_cleaner_knows(tmp_path: Path) -> None:
    """The names write_atomic gives its temp files are the ones remove_temp_files matches."""
    target = tmp_path / "checkpoint.json"
    leftovers: list[str] = []

    def crash(src: object, dst: object) -> None:
        leftovers.extend(p.name for p in tmp_path.iterdir())
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "replace", crash)
        with pytest.raises(KeyboardInterrupt):
            write_atomic(target, b"data")
    assert len(leftovers) == 1
    assert temp_name_pattern(r"checkpoint\.json").fullmatch(leftovers[0])


@pytest.mark.parametrize("name", ["../../../../etc", "..", ".", "a/../../b", ""])
def test_a_delete_outside_the_root_is_refused(tmp_path: Path, name: str) -> None:
    root = tmp_path / "vgpu" / "claims"
    root.mkdir(parents=True)
    victim = tmp_path / "etc"
    victim.mkdir()
    (victim / "passwd").write_text("root")
    with pytest.raises(OutsideRoot):
        remove_tree(root, root / name if name else root)
    assert (victim / "passwd").read_text() == "root"


def test_a_symlinked_entry_is_unlinked_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "claims"
    root.mkdir()
    victim = tmp_path / "etc"
    victim.mkdir()
    (victim / "passwd").write_text("root")
    (root / "claim").symlink_to(victim)
    assert remove_tree(root, root / "claim") is True
    assert not (root / "claim").exists()
    assert (victim / "passwd").read_text() == "root"


def test_links_inside_a_removed_tree_are_not_followed(tmp_path: Path) -> None:
    """Linux's rmtree walks by descriptor (O_NOFOLLOW, relative to the parent): a link a
    container planted below the claim dir is removed, its target left alone."""
    assert shutil.rmtree.avoids_symlink_attacks
    root = tmp_path / "claims"
    (root / "claim" / "sub").mkdir(parents=True)
    victim = tmp_path / "etc"
    victim.mkdir()
    (victim / "passwd").write_text("root")
    (root / "claim" / "sub" / "link").symlink_to(victim)
    (root / "claim" / "link").symlink_to(victim / "passwd")
    assert remove_tree(root, root / "claim") is True
    assert not (root / "claim").exists()
    assert (victim / "passwd").read_text() == "root"


def test_a_root_reached_through_a_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "x").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x").mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    with pytest.raises(OutsideRoot):
        remove_tree(real, tmp_path / "link" / "x")
    assert (elsewhere / "x").is_dir()
