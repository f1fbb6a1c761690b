"""What a container can build in its claim dir, deleted whole: a tree 3,000 directories deep (past
Python's recursion limit and past a descriptor per level), links planted at every depth (unlinked,
their targets untouched), and an entry the kernel refuses to remove (counted, the rest removed),
by `remove_tree`, by Unprepare (every claim of the call answered) and by the sweep."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.node.claims import GPUS, NODE, UID
from tests.unit.node.fake_api import FakeApi
from tests.unit.node.test_checkpoint import CLAIM
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node import checkpoint
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.claimdirs import MAX_ENTRIES, TenantDirs, trash, trash_dir
from vgpu_bridge.node.files import not_deleted, remove_tree
from vgpu_bridge.node.state import ClaimRef, DeviceState

DEPTH = 3000  # a recursive delete stops near 1,000 (Python's default recursion limit)
NEIGHBOUR = "0c1a1d00-0000-4000-8000-000000000002"
DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY


@pytest.fixture
def base() -> Iterator[Path]:
    """A temp dir on a tmpfs where there is one (3,000 levels are made and removed there in a
    tenth of the time of a busy disk), removed with `rm -rf` (coreutils walks any depth) so that
    what a failing test leaves never reaches pytest's recursive cleanup."""
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    made = Path(tempfile.mkdtemp(prefix="vb-deep-", dir=shm))
    try:
        yield made
    finally:
        subprocess.run(["rm", "-rf", "--", str(made)], check=False)


def deep_tree(top: Path, *, depth: int = DEPTH, victim: Path | None = None) -> None:
    """`top/d/d/.../d` `depth` levels deep, a file at every level, and links to `victim` (the
    directory and a file in it) at the top, halfway and at the bottom. Built by descriptor:
    the path of the bottom is far longer than PATH_MAX."""
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, DIR_OPEN)
    try:
        for level in range(depth + 1):
            os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
            if victim is not None and level in (0, depth // 2, depth):
                os.symlink(victim, "to-dir", dir_fd=fd)
                os.symlink(victim / "passwd", "to-file", dir_fd=fd)
            if level < depth:
                os.mkdir("d", dir_fd=fd)
                fd, parent = os.open("d", DIR_OPEN, dir_fd=fd), fd
                os.close(parent)
    finally:
        os.close(fd)


def _victim(base: Path) -> Path:
    victim = base / "etc"
    victim.mkdir()
    (victim / "passwd").write_text("root")
    (victim / "sub").mkdir()
    return victim


def _layout(base: Path) -> CdiLayout:
    return CdiLayout(cdi_dir=base / "cdi", vgpu_dir=base / "vgpu", driver=DEFAULT.driver)


def test_a_tree_three_thousand_deep_is_removed_whole_its_links_unlinked_not_followed(
    base: Path,
) -> None:
    victim = _victim(base)
    root = base / "trash"
    deep_tree(root / "claim", victim=victim)
    assert remove_tree(root, root / "claim") is True
    assert list(root.iterdir()) == []
    assert (victim / "passwd").read_text() == "root"
    assert (victim / "sub").is_dir()


def test_an_entry_that_cannot_be_removed_is_counted_and_the_rest_goes(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = base / "trash"
    deep_tree(root / "claim", depth=50)
    (root / "claim" / "d" / "d" / "immutable").touch()  # as `chattr +i` would make it
    immutable = (root / "claim" / "d" / "d" / "immutable").stat().st_ino
    real_unlink = os.unlink

    def refusing_unlink(path: str, *, dir_fd: int | None = None) -> None:
        if os.stat(path, dir_fd=dir_fd, follow_symlinks=False).st_ino == immutable:
            raise PermissionError(1, "Operation not permitted", path)
        real_unlink(path, dir_fd=dir_fd)

    before = not_deleted.counts()
    monkeypatch.setattr(os, "unlink", refusing_unlink)
    assert remove_tree(root, root / "claim") is True
    monkeypatch.undo()
    left = [Path(parent) / name for parent, _, names in os.walk(root) for name in names]
    assert [path.stat().st_ino for path in left] == [immutable]  # the 51 levels' rest: gone
    counts = not_deleted.counts()
    assert counts["EPERM"] == before.get("EPERM", 0) + 1
    assert counts["ENOTEMPTY"] == before.get("ENOTEMPTY", 0) + 1  # the top, still holding it


def _two_prepared_claims(
    base: Path, *, removals_per_pass: int | None = None
) -> tuple[DeviceState, CdiLayout]:
    layout = _layout(base)
    checkpoint_file = base / "plugin" / "checkpoint.json"
    checkpoint_file.parent.mkdir()
    claims = {uid: CLAIM.model_copy(update={"uid": uid, "name": f"c-{uid[-1]}"})
              for uid in (UID, NEIGHBOUR)}  # fmt: skip
    checkpoint.save(checkpoint_file, claims)
    state = DeviceState(FakeApi(), node=NODE, profile=DEFAULT, gpus=GPUS, layout=layout,
                        checkpoint_file=checkpoint_file,
                        removals_per_pass=removals_per_pass)  # fmt: skip
    state.start()  # writes both claims' specs and dirs
    return state, layout


def test_unprepare_deletes_a_deep_tree_and_answers_every_claim_of_the_call(
    base: Path,
) -> None:
    victim = _victim(base)
    state, layout = _two_prepared_claims(base)
    deep_tree(layout.shared_dir(UID), victim=victim)
    refs = [ClaimRef("team-a", f"c-{uid[-1]}", uid) for uid in (UID, NEIGHBOUR)]
    try:
        assert state.unprepare(refs) == {UID: None, NEIGHBOUR: None}
    finally:
        state.close()
    assert state.snapshot() == []
    assert not layout.shared_dir(UID).exists()
    assert not layout.shared_dir(NEIGHBOUR).exists()
    assert list(trash_dir(layout).iterdir()) == []
    assert (victim / "passwd").read_text() == "root"


def test_the_sweep_deletes_deep_trees_from_the_trash_and_the_priority_dir(
    base: Path,
) -> None:
    victim = _victim(base)
    layout = _layout(base)
    deep_tree(layout.shared_dir(UID), victim=victim)
    assert trash(layout, UID) is not None
    deep_tree(layout.priority_dir / "filler", victim=victim)
    deep_tree(layout.shared_dir(NEIGHBOUR), victim=victim)  # prepared: measured, kept
    dirs = TenantDirs(layout, claims=lambda: [NEIGHBOUR], gpu_uuids={"GPU-aaaa"})
    dirs.sweep()
    assert dirs.usage()[NEIGHBOUR].entries == MAX_ENTRIES  # a bounded walk, never a recursion
    assert list(trash_dir(layout).iterdir()) == []
    assert list(layout.priority_dir.iterdir()) == []
    assert {name: step.failures for name, step in dirs.steps().items()} == {
        "trash": 0, "priority-dir": 0, "claim-dirs": 0,
    }  # fmt: skip
    assert (victim / "passwd").read_text() == "root"
