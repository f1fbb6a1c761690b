"""Long work shows progress: the heartbeat helper, and the build steps that use it.

The clock is injected (each reading 30 s after the last) and the wait between lines is tiny, so
no test sleeps for real; a command that must outlast a heartbeat waits for the line itself.
"""

from __future__ import annotations

import io
import itertools
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from e2e.chart import helmbin
from e2e.cluster import build as cluster_build
from e2e.cluster.settings import Settings
from e2e.kind import steps
from e2e.progress import command_label, elapsed_text, progress
from e2e.realnode import build as realnode_build
from e2e.volcano import build as volcano_build

#: generous bound on waiting for a line that comes within milliseconds; not a speed check
HANG_GUARD_S = 30.0


class Lines(io.StringIO):
    """A stream that remembers whole lines and tells when a heartbeat arrived: ``seen`` is set
    and, when given, the ``flag`` file is created (a command can wait for it)."""

    def __init__(self, flag: Path | None = None) -> None:
        super().__init__()
        self.flag = flag
        self.seen = threading.Event()
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            written = super().write(text)
        if "still running" in text:
            self.seen.set()
            if self.flag is not None:
                self.flag.touch()
        return written

    def lines(self) -> list[str]:
        with self.lock:
            return self.getvalue().splitlines()


def stepping_clock(step_s: float = 30.0) -> Callable[[], float]:
    """A clock that reads 0, then ``step_s`` more on every reading."""
    readings = itertools.count()
    lock = threading.Lock()

    def clock() -> float:
        with lock:
            return next(readings) * step_s

    return clock


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (45.9, "45s"), (60, "1m00s"), (90, "1m30s"), (3723, "1h02m03s"), (-1, "0s")],
)
def test_elapsed_reads_like_a_stopwatch(seconds: float, text: str) -> None:
    assert elapsed_text(seconds) == text


def test_a_running_block_says_what_it_does_and_for_how_long() -> None:
    stream = Lines()
    with progress("go build x", interval_s=0.001, clock=stepping_clock(), stream=stream):
        assert stream.seen.wait(HANG_GUARD_S)
    lines = stream.lines()
    assert lines[0] == "go build x: still running, 30s"
    assert lines[-1].startswith("go build x: done in ")


def test_the_total_names_a_failure_and_the_error_goes_on() -> None:
    stream = Lines()
    clock = stepping_clock(45.0)
    with (
        pytest.raises(RuntimeError, match="boom"),
        progress("mmdebstrap", interval_s=3600, clock=clock, stream=stream),
    ):
        raise RuntimeError("boom")
    assert stream.lines() == ["mmdebstrap: failed after 45s"]


def test_short_work_prints_nothing_when_the_total_waits_for_long_work() -> None:
    stream = Lines()
    with progress(
        "docker tag", interval_s=3600, total_after_s=30, clock=stepping_clock(1), stream=stream
    ):
        pass
    assert stream.lines() == []


def test_no_total_when_the_caller_prints_its_own() -> None:
    stream = Lines()
    with progress("kind up: node image", interval_s=3600, total_after_s=None, stream=stream):
        pass
    assert stream.lines() == []


def test_command_label_keeps_the_program_and_its_words() -> None:
    command = ["/usr/bin/go", "install", "-trimpath", "-ldflags=-s -w", "example.com/x@v1"]
    assert command_label(command) == "go install example.com/x@v1"
    assert command_label(["docker", "build", "x" * 200], limit=40).endswith("...")
    assert len(command_label(["docker", "build", "x" * 200], limit=40)) == 40


# --- the long steps use it ---------------------------------------------------------------------


@contextmanager
def recorded_stderr(tmp_path: Path) -> Iterator[Lines]:
    """stderr, recorded, with a heartbeat every 10 ms; ``flag_file(tmp_path)`` appears with the
    first one. Entered in the test itself: pytest sets its own stderr for each test phase."""
    stream = Lines(flag_file(tmp_path))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stderr", stream)
        patch.setattr("e2e.progress.INTERVAL_S", 0.01)
        yield stream


def flag_file(tmp_path: Path) -> Path:
    return tmp_path / "heartbeat-seen"


def until(flag: Path) -> str:
    """A shell line that succeeds once ``flag`` exists (fails after HANG_GUARD_S)."""
    tries = int(HANG_GUARD_S * 10)
    return (
        f"i=0; while [ ! -e {flag} ] && [ $i -lt {tries} ]; do sleep 0.1; i=$((i+1)); done; "
        f"[ -e {flag} ]"
    )


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``go`` on PATH that runs until a heartbeat was printed, then writes its ``-o`` file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(
        "#!/bin/sh\n"
        f"{until(flag_file(tmp_path))} || exit 1\n"
        'out=""; prev=""\n'
        'for arg in "$@"; do [ "$prev" = "-o" ] && out="$arg"; prev="$arg"; done\n'
        '[ -z "$out" ] || : > "$out"\n'
    )
    go.chmod(go.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return go


def heartbeats(stream: Lines, what: str) -> list[str]:
    """The heartbeat lines of the step whose label starts with ``what``."""
    return [s for s in stream.lines() if s.startswith(what) and ": still running, " in s]


def test_a_kind_step_that_takes_long_says_so(tmp_path: Path) -> None:
    with recorded_stderr(tmp_path) as stderr:
        steps.run(["sh", "-c", until(flag_file(tmp_path))])
    assert heartbeats(stderr, "sh")


def test_a_real_node_build_step_that_takes_long_says_so(tmp_path: Path) -> None:
    with recorded_stderr(tmp_path) as stderr:
        realnode_build._run(["sh", "-c", until(flag_file(tmp_path))])
    assert heartbeats(stderr, "sh")


def test_the_control_planes_go_build_says_it_still_runs(fake_go: Path, tmp_path: Path) -> None:
    settings = Settings.from_env({"VGPU_BRIDGE_CACHE": str(tmp_path / "cache")})
    with recorded_stderr(tmp_path) as stderr:
        cluster_build._go_build(settings, tmp_path)
    assert settings.binary.is_file()
    assert heartbeats(stderr, f"go build vgpu-k8s (Kubernetes {settings.k8s_version})")


def test_the_volcano_go_build_says_it_still_runs(
    fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = volcano_build.VolcanoBuild("v1.15.1", tmp_path / "cache", {})
    build.bin_dir.mkdir(parents=True)
    monkeypatch.setattr(volcano_build, "_workspace", lambda _: tmp_path / "go.work")
    with recorded_stderr(tmp_path) as stderr:
        volcano_build._go_build(build)
    assert build.binary.is_file()
    assert heartbeats(stderr, "go build vgpu-volcano (Volcano v1.15.1)")


def test_the_helm_go_build_says_it_still_runs(fake_go: Path, tmp_path: Path) -> None:
    settings = Settings.from_env({"VGPU_BRIDGE_CACHE": str(tmp_path / "cache")})
    with recorded_stderr(tmp_path) as stderr:
        helmbin._go_build(settings, tmp_path, "v4.3.2", tmp_path / "helm")
    assert (tmp_path / "helm").is_file()
    assert heartbeats(stderr, "go build helm v4.3.2")
