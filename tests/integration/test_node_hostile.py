"""The node agent against what a hostile tenant or a crash can leave, over its real gRPC socket:
claim uids that are paths, crafted names, a file named like our spec, a claim dir of 300,000
files, a checkpoint that is no checkpoint, temp files of a killed write; and the limits file
that says a claim's limits where its container cannot change them."""

from __future__ import annotations

import copy
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.node_harness import AgentDirs, agent_dirs, running_agent
from tests.unit.node.claims import GPUS, NODE, allocated_claim, result
from vgpu_bridge.kube import KubeApi, KubeError
from vgpu_bridge.node import claimdirs
from vgpu_bridge.node.cdi import LIMITS_MOUNT
from vgpu_bridge.node.claimdirs import trash_dir
from vgpu_bridge.node.files import remove_tree
from vgpu_bridge.node.kubeletapi import dra_v1_pb2

Json = dict[str, Any]
A = "0c1a1d00-0000-4000-8000-00000000000a"
B = "0c1a1d00-0000-4000-8000-00000000000b"


class ClaimsApi(KubeApi):
    """An API server that holds allocated ResourceClaims and records every path it is asked."""

    def __init__(self, *claims: Json) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self.asked: list[str] = []
        self._claims = {
            "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}".format(
                **c["metadata"]
            ): c
            for c in claims
        }

    def get(self, path: str) -> Json:
        self.asked.append(path)
        if path not in self._claims:
            raise KubeError("GET", path, 404, "not found")
        return copy.deepcopy(self._claims[path])

    def list(self, path: str, **query: Any) -> Json:
        self.asked.append(path)
        return {"items": copy.deepcopy(list(self._claims.values()))}


def _claim(uid: str, name: str) -> Json:
    return allocated_claim(result("gpu-0", memory="3000Mi", cores="30"), uid=uid, name=name,
                           priority=1)  # fmt: skip


def _prepare(agent: Any, *claims: tuple[str, str, str]) -> dict[str, Any]:
    request = dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[dra_v1_pb2.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]
    )
    return dict(agent.v1().NodePrepareResources(request, timeout=30).claims)


def _unprepare(agent: Any, *claims: tuple[str, str, str]) -> dict[str, str]:
    request = dra_v1_pb2.NodeUnprepareResourcesRequest(
        claims=[dra_v1_pb2.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]
    )
    answer = agent.v1().NodeUnprepareResources(request, timeout=60).claims
    return {uid: entry.error for uid, entry in answer.items()}


@pytest.fixture
def nested() -> Iterator[AgentDirs]:
    """The agent's dirs four levels below a temp root: `claims/../../../../etc` is <root>/etc,
    never the machine's /etc, even on code that would follow it."""
    with agent_dirs() as dirs:
        yield AgentDirs(dirs.root / "a" / "b")


@pytest.fixture
def on_tmpfs() -> Iterator[AgentDirs]:
    """Dirs on /dev/shm where there is one: 300,000 files take ~100 s to make on a busy disk."""
    shm = Path("/dev/shm")
    base = "/dev/shm" if shm.is_dir() and os.access(shm, os.W_OK) else "/tmp"
    with agent_dirs(base=base) as dirs:
        yield dirs


def _victim(root: Path) -> Path:
    victim = root / "etc"
    victim.mkdir(parents=True)
    (victim / "passwd").write_text("root:x:0:0")
    return victim


# --- uids and names ---------------------------------------------------------------------------


def test_unprepare_of_a_uid_that_is_a_path_deletes_nothing_outside(nested: AgentDirs) -> None:
    root = nested.root.parent.parent
    victim = _victim(root)
    assert (nested.layout.vgpu_dir / "claims" / "../../../../etc").resolve() == victim.resolve()
    with running_agent(nested, GPUS, node=NODE) as agent:
        (nested.layout.vgpu_dir / "claims").mkdir(parents=True, exist_ok=True)
        errors = _unprepare(agent, ("team-a", "c", "../../../../etc"))
    assert errors["../../../../etc"].startswith("claim uid: must be a lowercase UUID")
    assert (victim / "passwd").read_text() == "root:x:0:0"


def test_a_spec_named_like_ours_with_a_dotdot_uid_deletes_nothing_at_start(
    nested: AgentDirs,
) -> None:
    """`<vendor>-claim_...json` read as uid `..` made start-up remove claims/.., the vgpu dir."""
    nested.layout.cdi_dir.mkdir(parents=True)
    planted = nested.layout.cdi_dir / "k8s.gpu.vgpu-bridge.io-claim_...json"
    planted.write_text("{}")
    library = nested.layout.vgpu_dir / "libvgpu.so"
    (nested.layout.vgpu_dir / "claims").mkdir(parents=True)
    library.write_bytes(b"\x7fELF")
    with running_agent(nested, GPUS, node=NODE):
        pass
    assert library.read_bytes() == b"\x7fELF"
    assert planted.exists()  # not ours: left alone


@pytest.mark.parametrize(
    ("namespace", "name", "uid", "field"),
    [
        ("team-a", "../../../../../api/v1/pods", A, "claim name"),
        ("team-a", "?watch=true", A, "claim name"),
        ("../../other-ns/resourceclaims", "x", A, "claim namespace"),
        ("team-a", "c", "../../etc", "claim uid"),
    ],
)
def test_a_crafted_name_is_refused_before_any_api_call(
    nested: AgentDirs, namespace: str, name: str, uid: str, field: str
) -> None:
    api = ClaimsApi(_claim(B, "fine"))
    with running_agent(nested, GPUS, node=NODE, api=api) as agent:
        api.asked.clear()
        answers = _prepare(agent, (namespace, name, uid), ("team-a", "fine", B))
    assert answers[uid].error.startswith(f"{field}: must be")
    assert not answers[B].error  # the call's other claim is prepared
    assert api.asked == ["/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims/fine"]


# --- tenant files and the lock ----------------------------------------------------------------


def _fill(directory: Path, count: int) -> None:
    for i in range(count):
        os.close(os.open(directory / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))


def test_unprepare_of_a_claim_with_300000_files_does_not_hold_back_another_prepare(
    on_tmpfs: AgentDirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The removal of A's files is held until B's Prepare has answered: B must be answered
    while A's files are still being removed (ordering by events, not timings). With the
    removal under the agent's lock, B waits for it: the removal finishes first."""
    api = ClaimsApi(_claim(A, "big"), _claim(B, "neighbour"))
    removal_started, neighbour_answered, removal_done = (threading.Event() for _ in range(3))
    real_remove_tree = remove_tree

    def held_remove_tree(root: Path, path: Path, **passes: Any) -> bool:
        if A in str(path):
            removal_started.set()
            neighbour_answered.wait(timeout=10)  # old code: B's Prepare waits on the lock
        removed = real_remove_tree(root, path, **passes)
        if A in str(path):
            removal_done.set()
        return removed

    with running_agent(on_tmpfs, GPUS, node=NODE, api=api) as agent:
        assert not _prepare(agent, ("team-a", "big", A))[A].error
        _fill(on_tmpfs.layout.shared_dir(A), 300_000)
        monkeypatch.setattr(claimdirs, "remove_tree", held_remove_tree)
        errors: dict[str, str] = {}
        unprepare = threading.Thread(
            target=lambda: errors.update(_unprepare(agent, ("team-a", "big", A)))
        )
        unprepare.start()
        assert removal_started.wait(timeout=60)
        answer = _prepare(agent, ("team-a", "neighbour", B))[B]
        removal_was_done = removal_done.is_set()
        neighbour_answered.set()
        unprepare.join(timeout=120)
    # 300,000 files are more than Unprepare's one removal pass: the sweep (not started by this
    # harness) takes the rest, a bounded pass at a time
    passes = 0
    while any(trash_dir(on_tmpfs.layout).iterdir()) and passes < 40:
        claimdirs.empty_trash(on_tmpfs.layout)
        passes += 1
    assert not answer.error
    assert not removal_was_done, "B's Prepare waited for A's files to be removed"
    assert errors == {A: ""}
    assert not on_tmpfs.layout.shared_dir(A).exists()
    assert not any(trash_dir(on_tmpfs.layout).iterdir()), f"left after {passes} sweeps"


# --- the limits file --------------------------------------------------------------------------


def test_prepare_writes_the_limits_file_the_spec_mounts_and_unprepare_removes_it(
    nested: AgentDirs,
) -> None:
    api = ClaimsApi(_claim(A, "c"))
    limits = nested.layout.limits_path(A)
    with running_agent(nested, GPUS, node=NODE, api=api) as agent:
        _prepare(agent, ("team-a", "c", A))
        assert limits.read_text() == (
            "vgpu-bridge-limits 2\n"
            "CUDA_DEVICE_MEMORY_LIMIT_GPU-aaaa=3000m\n"
            "CUDA_DEVICE_SM_LIMIT_GPU-aaaa=30\n"
            "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/shared/vgpu.cache\n"
            "CUDA_TASK_PRIORITY=1\n"
        )
        info = limits.stat()
        assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o444, os.geteuid())
        assert stat.S_IMODE(limits.parent.stat().st_mode) == 0o755
        assert limits.parent != nested.layout.shared_dir(A).parent  # not the tenant's dir
        spec = nested.layout.spec_path(A).read_text()
        assert f'"hostPath": "{limits}"' in spec
        assert LIMITS_MOUNT in spec
        assert _unprepare(agent, ("team-a", "c", A)) == {A: ""}
        assert not limits.exists()


def test_start_up_puts_back_a_lost_limits_file_and_removes_orphans(nested: AgentDirs) -> None:
    api = ClaimsApi(_claim(A, "c"))
    with running_agent(nested, GPUS, node=NODE, api=api) as agent:
        _prepare(agent, ("team-a", "c", A))
    limits = nested.layout.limits_path(A)
    wanted = limits.read_bytes()
    limits.unlink()
    orphan = nested.layout.limits_path(B)
    orphan.write_text("vgpu-bridge-limits 2\n")
    not_ours = nested.layout.limits_dir / "notes.txt"
    not_ours.write_text("kept")
    with running_agent(nested, GPUS, node=NODE, api=api):
        assert limits.read_bytes() == wanted
        assert not orphan.exists()
        assert not_ours.exists()


# --- a checkpoint that is no checkpoint, and what a kill -9 left -----------------------------


def _plant_checkpoint(path: Path, how: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "not UTF-8":
        path.write_bytes(b"\xff\xfe\x00garbage")
    elif how == "100k-deep JSON":
        path.write_text('{"version": "v1", "claims": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif how == "a directory":
        (path / "x").mkdir(parents=True)
    elif how == "a FIFO":
        os.mkfifo(path)


def _in_thread(work: Callable[[], object]) -> bool:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout=60)  # generous: a FIFO in the checkpoint's place blocks forever
    return not thread.is_alive()


@pytest.mark.parametrize("how", ["not UTF-8", "100k-deep JSON", "a directory", "a FIFO"])
def test_a_checkpoint_that_is_no_checkpoint_is_quarantined_and_the_agent_serves(
    nested: AgentDirs, how: str
) -> None:
    api = ClaimsApi(_claim(A, "c"))
    _plant_checkpoint(nested.checkpoint, how)
    answers: dict[str, Any] = {}

    def start_and_prepare() -> None:
        with running_agent(nested, GPUS, node=NODE, api=api) as agent:
            answers.update(_prepare(agent, ("team-a", "c", A)))

    assert _in_thread(start_and_prepare)
    assert not answers[A].error
    aside = [p for p in nested.plugin.iterdir() if p.name.startswith("checkpoint.json.corrupt-")]
    assert len(aside) == 1
    assert nested.checkpoint.is_file()


def test_temp_files_a_killed_write_left_are_removed_at_start(nested: AgentDirs) -> None:
    layout = nested.layout
    for directory in (nested.plugin, layout.cdi_dir, layout.limits_dir):
        directory.mkdir(parents=True, exist_ok=True)
    left = [
        nested.plugin / ".checkpoint.json.k1l2_d3.tmp",
        layout.cdi_dir / f".k8s.gpu.vgpu-bridge.io-claim_{A}.json.x9y8z7.tmp",
        layout.limits_dir / f".{A}.conf.abcdef.tmp",
    ]
    kept = layout.cdi_dir / ".someone-elses.json.abcdef.tmp"
    for path in [*left, kept]:
        path.write_text("half")
    with running_agent(nested, GPUS, node=NODE):
        assert not any(path.exists() for path in left)
        assert kept.exists()
