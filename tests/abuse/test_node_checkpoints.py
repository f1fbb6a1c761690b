"""The real agent starts and serves over every corrupt checkpoint, one after another in one
plugin dir: non-UTF-8 bytes, 100k-deep JSON, a directory, a FIFO, a symlink to /dev/zero,
truncated and wrong-shaped JSON; over a planted spec file whose uid is `..`; and over temp files
a kill -9 left. It keeps only a few quarantined checkpoints and never deletes its vgpu dir."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.abuse.agent import AgentDirs, agent_dirs, claim, running_agent
from tests.abuse.fake_api import FakeApi, fake_api
from vgpu_bridge.core import DEFAULT

MAX_QUARANTINED = 5  # "a few"


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("{}")


CORRUPTIONS: dict[str, Callable[[Path], object]] = {
    "non-UTF-8 bytes": lambda p: p.write_bytes(b"\xff\xfe\x00\x80" * 1000),
    "100k-deep JSON": lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
    "a directory": _directory,
    "a FIFO": lambda p: os.mkfifo(p),
    "a symlink to /dev/zero": lambda p: p.symlink_to("/dev/zero"),
    "truncated JSON": lambda p: p.write_text('{"claims": {"a": '),
    "JSON of the wrong shape": lambda p: p.write_text(json.dumps({"claims": [1, "x", None]})),
    "1e999999 in JSON": lambda p: p.write_text('{"version": 1e999999, "claims": {}}'),
}


@pytest.fixture
def dirs() -> Iterator[AgentDirs]:
    with agent_dirs() as made:
        yield made


@pytest.fixture
def node_api() -> Iterator[FakeApi]:
    with fake_api() as api:
        yield api


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()


def start_and_use(dirs: AgentDirs, api: FakeApi, what: str) -> str | None:
    """Start the agent, prepare and unprepare a claim; what went wrong, or None."""
    try:
        with running_agent(dirs, api) as agent:
            fresh = claim(api, "after-restart")
            answer = agent.prepare([fresh])[fresh.uid]
            if not answer.devices:
                return f"{what}: prepare failed after start: {answer.error}"
            agent.unprepare([fresh])
    except AssertionError as error:
        return f"{what}: {str(error)[-600:]}"
    return None


def test_every_corrupt_checkpoint_is_set_aside_and_the_agent_starts_and_serves(
    dirs: AgentDirs, node_api: FakeApi
) -> None:
    dirs.plugin.mkdir(parents=True)
    problems = []
    for what, corrupt in CORRUPTIONS.items():
        remove(dirs.checkpoint)
        corrupt(dirs.checkpoint)
        problems.append(start_and_use(dirs, node_api, what))
    quarantined = [p.name for p in dirs.plugin.iterdir() if "corrupt" in p.name]
    assert not [p for p in problems if p], "\n".join(p for p in problems if p)
    assert len(quarantined) <= MAX_QUARANTINED, quarantined


def test_start_up_deletes_no_dir_for_a_planted_spec_named_with_a_dotted_uid_nor_keeps_temp_files(
    dirs: AgentDirs, node_api: FakeApi
) -> None:
    dirs.cdi.mkdir(parents=True)
    dirs.vgpu.mkdir(parents=True)
    (dirs.vgpu / "libvgpu.so").write_text("canary")
    prefix = f"k8s.{DEFAULT.driver}-claim_"
    for uid in ("..", ".", "../..", "x/../.."):
        (dirs.cdi / f"{prefix}{uid.replace('/', '_')}.json").write_text("{}")
    (dirs.cdi / f"{prefix}...json").write_text("{}")
    dirs.plugin.mkdir(parents=True)
    leftover = dirs.plugin / ".checkpoint.json.k9xq2w1z.tmp"  # as write_atomic names its temp
    leftover.write_text("half")
    problem = start_and_use(dirs, node_api, "planted specs")
    assert problem is None, problem
    assert (dirs.vgpu / "libvgpu.so").read_text() == "canary"
    assert not leftover.exists()
