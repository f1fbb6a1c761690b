"""The host-pids file: the host pids of libvgpu processes seen only from inside their container,
resolved on a fake /proc and written next to the claim's region."""

from __future__ import annotations

import os
import shutil
from functools import partial
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.unit.node.test_region import _fake_process, _region
from vgpu_bridge.node.hostpids import (
    FILE,
    FileId,
    HostPidFiles,
    HostPids,
    Key,
    content_to_write,
    format_host_pids,
    resolve,
)
from vgpu_bridge.node.metrics import Container, _by_container
from vgpu_bridge.node.region import Process, read_region

UID = "uid-hp"


def test_the_file_has_a_version_line_then_one_line_per_resolved_slot_by_pid() -> None:
    table = {(103, 603): 5103, (101, 601): 5101, (102, 602): 0}
    assert format_host_pids(table) == b"vgpu-host-pids 1\n101 601 5101\n103 603 5103\n"
    assert format_host_pids({}) == b"vgpu-host-pids 1\n"


def test_only_processes_without_a_host_pid_are_resolved_and_each_only_once() -> None:
    asked: list[Key] = []

    def find(pid: int, start: int) -> int:
        asked.append((pid, start))
        return pid + 5000

    processes = [Process(101, 0, 601), Process(102, 7102, 602), Process(103, 0, 603)]
    table = resolve(processes, {(101, 601): 5101, (104, 604): 5104}, find)
    assert table == {(101, 601): 5101, (103, 603): 5103}  # a gone process is dropped
    assert asked == [(103, 603)]
    # a process not found is remembered as 0 and not looked for again while it lives
    assert resolve([Process(105, 0, 605)], {(105, 605): 0}, find) == {(105, 605): 0}
    assert asked == [(103, 603)]


@pytest.mark.parametrize(
    ("table", "current", "written"),
    [
        ({(101, 601): 5101}, b"vgpu-host-pids 1\n101 601 5101\n", None),
        ({(101, 601): 5101}, None, b"vgpu-host-pids 1\n101 601 5101\n"),
        (
            {(101, 601): 5101},
            b"vgpu-host-pids 1\n101 601 6666\n",
            b"vgpu-host-pids 1\n101 601 5101\n",
        ),
        ({}, None, None),
        ({(101, 601): 0}, None, None),
        ({}, b"vgpu-host-pids 1\n101 601 5101\n", b"vgpu-host-pids 1\n"),
        ({}, b"", b"vgpu-host-pids 1\n"),
    ],
    ids=[
        "unchanged",
        "new",
        "changed",
        "nothing-to-say",
        "only-unfound",
        "process-gone",
        "not-a-regular-file",
    ],
)
def test_the_file_is_written_only_when_its_content_changes(
    table: dict[Key, int], current: bytes | None, written: bytes | None
) -> None:
    assert content_to_write(table, current) == written


def _claim(vgpu_dir: Path, region: bytes) -> Path:
    directory = vgpu_dir / "claims" / UID
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vgpu.cache").write_bytes(region)
    return directory


def _host(proc: Path, region: Path) -> None:
    """Host processes mapping the claim's `region`, and one of another claim."""
    _fake_process(proc, 5101, ns_pids="5101\t101", start=601, cgroup="", maps=region)
    _fake_process(proc, 5200, ns_pids="5200\t103", start=601, cgroup="", maps=region)  # start
    _fake_process(proc, 5003, ns_pids="5003\t103", start=603, cgroup="")  # another region
    _fake_process(proc, 5103, ns_pids="5103\t103", start=603, cgroup="", maps=region)


def test_slots_without_a_host_pid_are_found_on_the_host_and_written(tmp_path: Path) -> None:
    proc, vgpu = tmp_path / "proc", tmp_path / "vgpu"
    proc.mkdir()
    region = _region(devices=["GPU-a"], slots=[(101, [1], 1), (103, [1], 1)], high_water=2,
                     host_pids=False)  # fmt: skip
    directory = _claim(vgpu, region)
    _host(proc, directory / "vgpu.cache")
    files = HostPidFiles(lambda: [UID, "uid-without-region"], vgpu_dir=vgpu, proc=proc)
    files.sync()
    path = directory / FILE
    assert path.read_bytes() == b"vgpu-host-pids 1\n101 601 5101\n103 603 5103\n"
    assert path.stat().st_mode & 0o777 == 0o644
    assert files.found(UID) == {(101, 601): 5101, (103, 603): 5103}  # what the metrics count by
    assert not (vgpu / "claims" / "uid-without-region").exists()
    first = path.stat().st_ino

    # resolved slots are not looked for again (no /proc scan: it is gone), the file is left alone
    shutil.rmtree(proc)
    files.sync()
    assert path.stat().st_ino == first
    assert sorted(p.name for p in directory.iterdir()) == [FILE, "vgpu.cache"]  # no temp file

    # process 103 exits: its line goes
    _claim(vgpu, _region(devices=["GPU-a"], slots=[(101, [1], 1)], high_water=1, host_pids=False))
    files.sync()
    assert path.read_bytes() == b"vgpu-host-pids 1\n101 601 5101\n"


def test_regions_whose_processes_know_their_host_pids_get_no_file_and_no_scan(
    tmp_path: Path,
) -> None:
    region = _region(devices=["GPU-a"], slots=[(101, [1], 1)], high_water=1, host_pids=True)
    directory = _claim(tmp_path / "vgpu", region)
    HostPidFiles(lambda: [UID], vgpu_dir=tmp_path / "vgpu", proc=tmp_path / "no-proc").sync()
    assert not (directory / FILE).exists()


def test_a_symlink_put_in_place_of_the_file_is_replaced_not_followed(tmp_path: Path) -> None:
    proc, vgpu = tmp_path / "proc", tmp_path / "vgpu"
    proc.mkdir()
    directory = _claim(vgpu, _region(devices=["GPU-a"], slots=[(101, [1], 1)], high_water=1,
                                     host_pids=False))  # fmt: skip
    _host(proc, directory / "vgpu.cache")
    target = tmp_path / "host-file"
    target.write_bytes(b"the host's\n")
    os.symlink(target, directory / FILE)
    os.mkfifo(directory / "fifo")
    HostPidFiles(lambda: [UID], vgpu_dir=vgpu, proc=proc).sync()
    assert not (directory / FILE).is_symlink()
    assert (directory / FILE).read_bytes() == b"vgpu-host-pids 1\n101 601 5101\n"
    assert target.read_bytes() == b"the host's\n"
    # a FIFO in its place is replaced too, without blocking on it
    (directory / FILE).unlink()
    os.rename(directory / "fifo", directory / FILE)
    HostPidFiles(lambda: [UID], vgpu_dir=vgpu, proc=proc).sync()
    assert (directory / FILE).read_bytes() == b"vgpu-host-pids 1\n101 601 5101\n"


def test_a_file_that_cannot_be_written_is_logged_once_and_other_claims_go_on(
    tmp_path: Path,
) -> None:
    proc, vgpu = tmp_path / "proc", tmp_path / "vgpu"
    proc.mkdir()
    region = _region(devices=["GPU-a"], slots=[(101, [1], 1)], high_water=1, host_pids=False)
    blocked = _claim(vgpu, region)
    (blocked / FILE / "in-the-way").mkdir(parents=True)  # a directory cannot be replaced
    other = vgpu / "claims" / "uid-other"
    shutil.copytree(blocked, other, ignore=shutil.ignore_patterns(FILE))
    _host(proc, blocked / "vgpu.cache")
    # the other claim's process: the same container pid and start tick, its own region
    _fake_process(proc, 6101, ns_pids="6101\t101", start=601, cgroup="",
                  maps=other / "vgpu.cache")  # fmt: skip
    files = HostPidFiles(lambda: [UID, "uid-other"], vgpu_dir=vgpu, proc=proc)
    with capture_logs() as logs:
        files.sync()
        files.sync()
    warned = [(e["event"], e["claim_uid"]) for e in logs if e["log_level"] != "debug"]
    assert warned == [("cannot write host pids", UID)]
    assert (other / FILE).read_bytes() == b"vgpu-host-pids 1\n101 601 6101\n"
    assert sorted(p.name for p in blocked.iterdir()) == [FILE, "vgpu.cache"]  # no temp file left


def test_a_process_seen_only_inside_its_container_is_found_on_the_host(tmp_path: Path) -> None:
    """libvgpu in a container knows only its own pid and start time; the agent finds the host
    process with that start time whose innermost pid it is and which maps the claim's region,
    and so its container and pod. Two pods' first processes often share pid and start tick."""
    uid, other_uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "11111111-2222-3333-4444-555555555555"
    ours, other = "a" * 64, "b" * 64
    region_file, other_region = tmp_path / "ours.cache", tmp_path / "other.cache"
    region_file.write_bytes(b"r")
    other_region.write_bytes(b"r")
    proc = tmp_path / "proc"
    proc.mkdir()
    # another pod's process: the same container pid and start tick, but its own claim's region
    _fake_process(proc, 5001, ns_pids="5001\t101", start=601, maps=other_region,
                  cgroup=f"0::/vgpu-realnode/besteffort/pod{other_uid}/{other}\n")  # fmt: skip
    _fake_process(proc, 5101, ns_pids="5101\t101", start=601, maps=region_file,
                  cgroup=f"0::/vgpu-realnode/besteffort/pod{uid}/{ours}\n")  # fmt: skip
    # same start time, another container's pid 7: not ours
    _fake_process(proc, 5200, ns_pids="5200\t7", start=601, maps=region_file,
                  cgroup=f"0::/vgpu-realnode/besteffort/pod{uid}/{other}\n")  # fmt: skip
    # pid 103 in some container, but started at another time: pid reuse, not ours
    _fake_process(proc, 5103, ns_pids="5103\t103", start=9999, maps=region_file,
                  cgroup=f"0::/vgpu-realnode/besteffort/pod{uid}/{other}\n")  # fmt: skip
    (proc / "self").mkdir()  # not a pid: ignored
    usage = read_region(
        _region(
            devices=["GPU-aaaa"],
            slots=[(101, [100], 1), (103, [20], 1)],
            high_water=2,
            host_pids=False,
        )
    )
    assert set(usage.by_process) == {Process(101, 0, 601), Process(103, 0, 603)}
    host_pids = HostPids(proc)
    mine, theirs = FileId.of(region_file), FileId.of(other_region)
    assert mine is not None
    assert theirs is not None
    assert host_pids.find(101, 601, maps=mine) == 5101
    assert host_pids.find(101, 601, maps=theirs) == 5001
    assert host_pids.find(103, 603, maps=mine) == 0
    # the agent's table for the claim, which the metrics count by
    found = resolve(usage.by_process, {}, partial(host_pids.find, maps=mine))
    assert found == {(101, 601): 5101, (103, 603): 0}
    assert _by_container(usage, proc, found) == {
        Container(ours, uid): {"GPU-aaaa": 100},
        Container("", ""): {"GPU-aaaa": 20},
    }
