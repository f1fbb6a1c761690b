"""The agent's uninstall from a node (`uninstall.py`): SIGTERM is an uninstall only when its
DaemonSet, seen once, is gone or being deleted; the uninstall removes every file of ours from a
node (never through a link a container planted, never another driver's spec) and posts no
Event (the chart's pre-delete hook tells the pods). Node state is a temp dir; the API a recording
server."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from tests.unit.node.claims import NODE
from tests.unit.recording_api import RecordingApi
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.checkpoint import PreparedClaim
from vgpu_bridge.node.uninstall import (
    NodeFiles,
    Owner,
    OwnerWatch,
    drain,
    is_uninstall,
    mount_points_left,
    remove_node_files,
)

Json = dict[str, Any]
UID = "8f1d0000-0000-4000-8000-0000000000aa"
OTHER_UID = "0c1a1d00-0000-4000-8000-0000000000bb"
NAMESPACE = "agents"
DAEMONSET = "vgpu-bridge-agent"
DS_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets/{DAEMONSET}"
CLAIMS = "/apis/resource.k8s.io/v1"
P, D, G, U = Owner.PRESENT, Owner.DELETING, Owner.GONE, Owner.UNKNOWN


@pytest.mark.parametrize(
    ("read", "watched", "seen", "uninstall"),
    [
        (G, P, True, True),  # deleted since the watch last spoke: the read knows
        (D, P, True, True),  # foreground deletion, or a finalizer
        (P, G, True, False),  # deleted and made again (orphaned pods adopted): a restart
        (U, G, True, True),  # token refused after `helm uninstall`: the watch was told
        (U, D, True, True),
        (U, P, True, False),  # nothing known: never a guess
        (U, U, True, False),
        (P, P, True, False),  # a rolling update, an eviction, a drain
        (G, G, False, False),  # never seen: a wrong name must not wipe a node on each restart
        (U, G, False, False),
    ],
)
def test_sigterm_is_an_uninstall_only_when_the_daemonset_seen_is_gone_or_going(
    read: Owner, watched: Owner, seen: bool, uninstall: bool
) -> None:
    assert is_uninstall(read=read, watched=watched, seen_present=seen) is uninstall


def _daemonset(*, deleting: bool = False, uid: str = "ds-uid") -> Json:
    meta: Json = {"name": DAEMONSET, "namespace": NAMESPACE, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T16:00:00Z"
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta}


def test_a_daemonset_read_present_then_gone_is_an_uninstall(recorded: RecordingApi) -> None:
    watch = OwnerWatch(recorded.api, namespace=NAMESPACE, name=DAEMONSET)
    recorded.objects[DS_PATH] = _daemonset()
    assert watch.uninstalling() is False  # a restart
    del recorded.objects[DS_PATH]
    assert watch.uninstalling() is True


def test_a_daemonset_being_deleted_is_an_uninstall(recorded: RecordingApi) -> None:
    watch = OwnerWatch(recorded.api, namespace=NAMESPACE, name=DAEMONSET)
    recorded.objects[DS_PATH] = _daemonset()
    watch.read()
    recorded.objects[DS_PATH] = _daemonset(deleting=True)
    assert watch.uninstalling() is True


def test_a_daemonset_the_agent_cannot_read_is_a_restart(recorded: RecordingApi) -> None:
    watch = OwnerWatch(recorded.api, namespace=NAMESPACE, name=DAEMONSET)
    recorded.objects[DS_PATH] = _daemonset()
    watch.read()
    recorded.answer("GET", DS_PATH, 403, {"kind": "Status", "code": 403})
    assert watch.uninstalling() is False


def test_a_daemonset_never_seen_is_a_restart_even_when_404(recorded: RecordingApi) -> None:
    assert OwnerWatch(recorded.api, namespace=NAMESPACE, name=DAEMONSET).uninstalling() is False


def test_a_daemonset_made_again_under_the_same_name_is_its_successor(
    recorded: RecordingApi,
) -> None:
    """`kubectl replace --force`: gone at SIGTERM, made again (another uid) a moment after."""
    watch = OwnerWatch(recorded.api, namespace=NAMESPACE, name=DAEMONSET)
    recorded.objects[DS_PATH] = _daemonset(uid="first")
    watch.read()
    assert watch.successor(read=True) is False  # the same one, read again
    del recorded.objects[DS_PATH]
    assert watch.uninstalling() is True
    assert watch.successor(read=True) is False
    recorded.objects[DS_PATH] = _daemonset(uid="second")
    assert watch.successor() is False  # nothing read or watched since
    assert watch.successor(read=True) is True
    assert watch.uninstalling() is False


def test_a_successor_being_deleted_is_none(recorded: RecordingApi) -> None:
    watch = OwnerWatch(recorded.api, namespace=NAMESPACE, name=DAEMONSET)
    recorded.objects[DS_PATH] = _daemonset(uid="first")
    watch.read()
    recorded.objects[DS_PATH] = _daemonset(uid="second", deleting=True)
    assert watch.successor(read=True) is False
    assert is_uninstall(read=G, watched=G, seen_present=True, successor=True) is False


# --- the node's files ----------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> NodeFiles:
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    return NodeFiles(layout, tmp_path / "plugins" / DEFAULT.driver / "checkpoint.json")


def _fill_node(files: NodeFiles, outside: Path) -> None:
    """What an agent with two prepared claims leaves, and what containers planted."""
    layout = files.layout
    layout.cdi_dir.mkdir(parents=True)
    for uid in (UID, OTHER_UID):
        layout.spec_path(uid).write_text("{}")
        claim_dir = layout.shared_dir(uid)
        claim_dir.mkdir(parents=True)
        (claim_dir / "vgpu.cache").write_bytes(b"\0" * 64)
        (claim_dir / "host-pids").write_text("vgpu-host-pids 1\n")
    layout.limits_dir.mkdir()
    layout.limits_path(UID).write_text("vgpu-bridge-limits 2\n")
    (layout.cdi_dir / f".{layout.spec_path(UID).name}.abc123.tmp").write_text("{")
    (layout.shared_dir(UID) / "planted").symlink_to(outside)  # a container's link
    (layout.shared_dir(OTHER_UID) / "deep" / "er").mkdir(parents=True)
    layout.priority_dir.mkdir()
    (layout.priority_dir / "GPU-aaaa.board").write_bytes(b"\0" * 128)
    (layout.priority_dir / "link").symlink_to(outside)
    (layout.vgpu_dir / "libvgpu.so").write_bytes(b"\x7fELF")
    (layout.vgpu_dir / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    mock_libs = layout.vgpu_dir / "mock-driver" / "usr" / "lib" / "x86_64-linux-gnu"
    mock_libs.mkdir(parents=True)
    (mock_libs / "libcuda.so.570.124.06").write_bytes(b"\x7fELF")
    plugin = files.checkpoint_file.parent
    plugin.mkdir(parents=True)
    files.checkpoint_file.write_text("{}")
    (plugin / "agent.lock").write_text("")
    (plugin / "checkpoint.json.corrupt-20261207T160000.000000001").write_text("x")


def test_uninstall_removes_every_file_of_ours_from_the_node(
    files: NodeFiles, tmp_path: Path
) -> None:
    outside = tmp_path / "host-secret"
    outside.mkdir()
    (outside / "keep").write_text("not ours")
    _fill_node(files, outside)
    assert remove_node_files(files) == []
    layout = files.layout
    assert not layout.vgpu_dir.exists()
    assert not files.checkpoint_file.parent.exists()
    assert os.listdir(layout.cdi_dir) == []  # the dir is every CDI user's: it stays
    assert (outside / "keep").read_text() == "not ours"  # no link followed


def test_uninstall_leaves_what_is_not_ours(files: NodeFiles, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    _fill_node(files, outside)
    layout = files.layout
    nvidia_spec = layout.cdi_dir / f"k8s.gpu.nvidia.com-claim_{UID}.json"
    nvidia_spec.write_text("{}")
    someone_elses = layout.vgpu_dir / "notes.txt"
    someone_elses.write_text("an admin's")
    assert remove_node_files(files) == []
    assert nvidia_spec.exists()
    assert someone_elses.read_text() == "an admin's"
    assert sorted(os.listdir(layout.vgpu_dir)) == ["notes.txt"]


def test_the_agents_own_mount_points_stay_empty_and_are_no_failure(
    files: NodeFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the pod, the vgpu dir and the plugin dir are hostPath mounts: rmdir says EBUSY (seen on
    kind). They are emptied, not reported as left, and named as the mount points that stay."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    _fill_node(files, outside)
    mounts = {files.layout.vgpu_dir, files.checkpoint_file.parent}
    real_rmdir = os.rmdir

    def rmdir(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> None:
        if dir_fd is None and Path(path) in mounts:
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        real_rmdir(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "rmdir", rmdir)
    assert remove_node_files(files) == []
    assert os.listdir(files.layout.vgpu_dir) == []
    assert os.listdir(files.checkpoint_file.parent) == []
    assert sorted(mount_points_left(files)) == sorted(str(m) for m in mounts)


def test_removing_a_node_with_nothing_of_ours_is_fine(files: NodeFiles) -> None:
    assert remove_node_files(files) == []


# --- the drain -----------------------------------------------------------------------------


class _Claims:
    """A DeviceState's `snapshot` whose claims the kubelet unprepares one per look."""

    def __init__(self, count: int) -> None:
        self.claims = [_claim(f"c{i}", UID[:-1] + str(i)) for i in range(count)]
        self.looks = 0

    def snapshot(self) -> list[PreparedClaim]:
        self.looks += 1
        left = list(self.claims)
        if self.claims:
            self.claims.pop()
        return left


def _claim(name: str, uid: str = UID) -> PreparedClaim:
    return PreparedClaim(uid=uid, namespace="team", name=name, devices=(), priority=None,
                         cdi_spec="{}")  # fmt: skip


def test_the_drain_ends_once_the_kubelet_has_unprepared_every_claim() -> None:
    claims = _Claims(3)
    left = drain(claims, seconds=3600, sleep=lambda _: None)  # type: ignore[arg-type]
    assert left == []
    assert claims.looks == 4


def test_the_drain_ends_at_its_bound_with_the_claims_still_prepared() -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    class Running:
        def snapshot(self) -> list[PreparedClaim]:
            return [_claim("running")]

    left = drain(Running(), seconds=5, clock=lambda: now[0], sleep=sleep)  # type: ignore[arg-type]
    assert left is not None
    assert [claim.name for claim in left] == ["running"]
    assert now[0] == 5


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_drain_waits_for_a_successor_even_with_no_claim_prepared() -> None:
    clock = _Clock()
    claims: Any = _Claims(0)
    left = drain(claims, seconds=45, at_least=10, clock=clock, sleep=clock.sleep)
    assert left == []
    assert clock.now == 10


def test_the_drain_is_called_off_once_the_daemonset_is_made_again() -> None:
    clock = _Clock()
    claims: Any = _Claims(0)
    left = drain(claims, seconds=45, at_least=10, clock=clock, sleep=clock.sleep,
                 successor=lambda: clock.now >= 3)  # fmt: skip
    assert left is None
    assert clock.now == 3


def test_an_uninstall_with_a_successor_removes_nothing(files: NodeFiles, tmp_path: Path) -> None:
    from vgpu_bridge.node.uninstall import Uninstall

    _fill_node(files, tmp_path / "outside")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    refused: list[str] = []
    stopped: list[bool] = []

    class State(_Claims):
        def refuse_new_claims(self, reason: str) -> None:
            refused.append(reason)

    for made_again_during_drain in (True, False):
        seen = iter([made_again_during_drain] + [True] * 10)
        Uninstall(state=State(0), workers_done=lambda: None,  # type: ignore[arg-type]
                  stop_serving=lambda: stopped.append(True), files=files, drain_seconds=1,
                  successor=lambda read=False, seen=seen: next(seen),
                  successor_wait_s=0).run()  # fmt: skip
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert len(refused) == 2
    assert stopped == [True, True]


# --- during the drain ----------------------------------------------------------------------


def test_during_an_uninstall_new_claims_are_refused_and_prepared_ones_still_answer(
    recorded: RecordingApi, tmp_path: Path
) -> None:
    from tests.unit.node import test_extended_resource_claims as extended
    from vgpu_bridge.node.state import ClaimRef, DeviceState
    from vgpu_bridge.node.uninstall import REFUSAL

    recorded.objects[f"{CLAIMS}/resourceclaims"] = {"items": []}
    claim = extended.scheduler_claim(extended.GPUS[0])
    recorded.objects[
        f"{CLAIMS}/namespaces/{extended.NAMESPACE}/resourceclaims/{extended.CLAIM}"
    ] = claim
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    (tmp_path / "plugin").mkdir()
    checkpoint_file = tmp_path / "plugin" / "checkpoint.json"
    state = DeviceState(recorded.api, node=NODE, profile=DEFAULT, gpus=extended.GPUS,
                        layout=layout, checkpoint_file=checkpoint_file)  # fmt: skip
    state.start()
    try:
        prepared = ClaimRef(extended.NAMESPACE, extended.CLAIM, extended.UID)
        assert state.prepare([prepared])[extended.UID].error is None
        state.refuse_new_claims(REFUSAL)
        new = ClaimRef(extended.NAMESPACE, "another", OTHER_UID)
        answers = state.prepare([prepared, new])
        assert answers[extended.UID].error is None
        assert answers[OTHER_UID].error == REFUSAL
        assert state.unprepare([prepared]) == {extended.UID: None}
        assert not layout.spec_path(OTHER_UID).exists()
    finally:
        state.close()


def test_the_daemonset_and_its_namespace_are_set_together() -> None:
    from vgpu_bridge.flag_settings import SettingsError
    from vgpu_bridge.node.settings import Settings

    with pytest.raises(SettingsError, match="daemonset"):
        Settings(node_name="n", daemonset=DAEMONSET)
    settings = Settings(node_name="n", daemonset=DAEMONSET, daemonset_namespace=NAMESPACE)
    assert settings.uninstall_drain_seconds == 45
    with pytest.raises(SettingsError, match="daemonset_namespace"):
        Settings(node_name="n", daemonset=DAEMONSET, daemonset_namespace="Not/A/Label")
