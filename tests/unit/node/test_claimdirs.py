"""Dirs containers can write: claim dirs go to the trash in one rename and are deleted apart;
walks stop at a bound; the priority dir keeps only boards of this node's GPUs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.unit.node.claims import UID
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.claimdirs import (
    BOARD_SIZE,
    EXPECTED_ENTRIES,
    TenantDirs,
    clean_priority_dir,
    empty_trash,
    measure,
    trash,
    trash_dir,
)
from vgpu_bridge.node.files import OutsideRoot


def _layout(tmp_path: Path) -> CdiLayout:
    return CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)


def test_a_claim_dir_goes_to_the_trash_whole_and_is_deleted_from_there(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    (layout.shared_dir(UID) / "deep" / "er").mkdir(parents=True)
    (layout.shared_dir(UID) / "vgpu.cache").write_bytes(b"r")
    moved = trash(layout, UID)
    assert moved is not None
    assert moved.parent == trash_dir(layout)
    assert trash_dir(layout).stat().st_mode & 0o777 == 0o700
    assert (moved / "deep" / "er").is_dir()
    assert not layout.shared_dir(UID).exists()
    assert trash(layout, UID) is None  # nothing left to move
    assert empty_trash(layout, [moved]) == 1
    assert not any(trash_dir(layout).iterdir())


def test_a_uid_that_is_a_path_is_never_moved(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    (layout.vgpu_dir / "claims").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    with pytest.raises(OutsideRoot):
        trash(layout, "../../etc")
    assert (tmp_path / "etc").is_dir()


def test_emptying_all_of_the_trash_takes_what_a_killed_agent_left(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    for name in ("a.1", "b.2"):
        (trash_dir(layout) / name / "x").mkdir(parents=True)
    os.symlink(tmp_path, trash_dir(layout) / "link.3")  # unlinked, never followed
    assert empty_trash(layout) == 3
    assert not any(trash_dir(layout).iterdir())
    assert tmp_path.is_dir()


def test_a_walk_stops_at_its_bound_and_says_so(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"f{i}").write_bytes(b"x" * 5000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "g").write_bytes(b"y")
    os.symlink("/", tmp_path / "root-link")  # counted, not followed
    full = measure(tmp_path)
    assert (full.entries, full.complete) == (33, True)
    assert full.bytes >= 30 * 4096
    cut = measure(tmp_path, max_entries=10)
    assert (cut.entries, cut.complete) == (10, False)


def _board(directory: Path, name: str, size: int = BOARD_SIZE) -> None:
    with (directory / name).open("wb") as handle:
        handle.truncate(size)


def test_the_priority_dir_keeps_only_boards_of_this_nodes_gpus(tmp_path: Path) -> None:
    _board(tmp_path, "GPU-aaaa.board")
    _board(tmp_path, "GPU-bbbb.board", size=0)  # libvgpu sizes it right after creating it
    _board(tmp_path, "GPU-zzzz.board")  # no such GPU here
    _board(tmp_path, "GPU-cccc.board", size=50 * 2**20)  # not a board: a disk filler
    (tmp_path / "junk").write_bytes(b"j" * 1000)
    (tmp_path / "dir" / "deep").mkdir(parents=True)
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/etc/passwd", tmp_path / "GPU-dddd.board")
    removed = clean_priority_dir(tmp_path, {"GPU-aaaa", "GPU-bbbb", "GPU-cccc", "GPU-dddd"})
    assert sorted(removed) == ["GPU-cccc.board", "GPU-dddd.board", "GPU-zzzz.board", "dir",
                               "fifo", "junk"]  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["GPU-aaaa.board", "GPU-bbbb.board"]
    assert Path("/etc/passwd").exists()


def test_the_priority_dir_cleaner_looks_at_a_bounded_number_per_round(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"junk{i}").touch()
    assert len(clean_priority_dir(tmp_path, set(), max_entries=20)) == 20
    assert len(list(tmp_path.iterdir())) == 30


def test_a_sweep_measures_claim_dirs_and_warns_once_per_overfull_claim(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    layout.shared_dir(UID).mkdir(parents=True)
    layout.priority_dir.mkdir()
    (layout.priority_dir / "junk").touch()
    for i in range(EXPECTED_ENTRIES + 5):
        (layout.shared_dir(UID) / f"f{i}").touch()
    (trash_dir(layout) / "left.1").mkdir(parents=True)
    dirs = TenantDirs(layout, claims=lambda: [UID], gpu_uuids={"GPU-aaaa"})
    with capture_logs() as logs:
        dirs.sweep()
        dirs.sweep()
    events = [e["event"] for e in logs]
    assert events.count("a claim's directory holds more than libvgpu puts there") == 1
    assert events.count("removed a file no GPU's priority board may be") == 1
    assert dirs.usage()[UID].entries == EXPECTED_ENTRIES + 5
    assert not any(trash_dir(layout).iterdir())
