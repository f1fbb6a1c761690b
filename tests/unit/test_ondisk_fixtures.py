"""Today's agent over the files an earlier release left on a node (tests/fixtures/ondisk/<commit>/,
written by that release's own code: scripts/ondisk_fixtures.py). Its containers keep running
through an upgrade, so the new agent must take over its claims as they are: restore the
checkpoint, answer Prepare with the same devices, rewrite a wiped CDI spec byte for byte, and
leave nothing after Unprepare; and read the region, host-pids file and boards its libvgpu uses.
A change to any of these formats fails here first (docs/upgrade.md says what it must do)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from vgpu_bridge.core import DEFAULT
from vgpu_bridge.core.profiles import ENFORCER_DRIVER, DriverProfile, our_profile
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.node import claimdirs, hostpids
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.nvidia_slices import NvidiaCards
from vgpu_bridge.node.region import read_region_file
from vgpu_bridge.node.state import ClaimRef, DeviceState

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ondisk"
RELEASES = sorted(path.name for path in FIXTURES.iterdir() if path.is_dir())
NODE = "node-a"
NODES = ("node", "enforcer-node")


class NoApi(KubeApi):
    """What the agent knows of the earlier release's claims comes from disk: any API call
    fails the test."""

    def __init__(self) -> None:
        pass

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        raise AssertionError(f"the API was called: {method} {path}")


def _no_slices() -> list[dict[str, Any]]:
    raise AssertionError("NVIDIA's slices were read")


@dataclass(frozen=True)
class Node:
    """A copy of one node of a release's fixture (`node`: our cards; `enforcer-node`: NVIDIA's
    cards with our limits), with the modes and empty directories it had (git keeps neither)."""

    fixture: Path
    root: Path
    release: dict[str, Any]

    @property
    def enforcer(self) -> bool:
        return self.root.name == "enforcer-node"

    @property
    def profile(self) -> DriverProfile:
        return our_profile(ENFORCER_DRIVER) if self.enforcer else DEFAULT

    @property
    def layout(self) -> CdiLayout:
        return CdiLayout(cdi_dir=self.root / "cdi", vgpu_dir=self.root / "vgpu",
                         driver=self.profile.driver, enforcer=self.enforcer)  # fmt: skip

    @property
    def claims(self) -> list[str]:
        return list(self.release["claims"][self.root.name])

    def refs(self) -> list[ClaimRef]:
        objects = json.loads((self.fixture / self.root.name / "claims.json").read_text())
        return [ClaimRef(o["metadata"]["namespace"], o["metadata"]["name"], o["metadata"]["uid"])
                for o in objects]  # fmt: skip

    def answers(self) -> Any:
        return json.loads((self.fixture / self.root.name / "prepared.json").read_text())

    def agent(self) -> DeviceState:
        gpus = [Gpu(index=i, uuid=uuid, product_name="NVIDIA Fake GPU", memory=16 * 2**30, minor=i)
                for i, uuid in enumerate(self.release["gpus"])]  # fmt: skip
        cards = NvidiaCards(_no_slices, node=NODE) if self.enforcer else None
        return DeviceState(NoApi(), node=NODE, profile=self.profile,
                           gpus=() if self.enforcer else gpus, layout=self.layout,
                           checkpoint_file=self.root / "plugin" / "checkpoint.json",
                           nvidia_cards=cards)  # fmt: skip

    def files(self) -> dict[str, tuple[bytes, int]]:
        """Every file's bytes and mode, by path (the agent's lock file aside)."""
        return {
            str(p.relative_to(self.root)): (p.read_bytes(), p.stat().st_mode & 0o7777)
            for p in sorted(self.root.rglob("*"))
            if p.is_file() and p.name not in ("agent.lock", "prepared.json", "claims.json")
        }

    def original(self, relative: str) -> bytes:
        return (self.fixture / self.root.name / relative).read_bytes()


def copy_release(fixture: Path, to: Path) -> None:
    """The release's nodes under `to`, with every mode and empty directory of modes.json."""
    shutil.copytree(fixture, to, dirs_exist_ok=True)
    modes = json.loads((fixture / "modes.json").read_text())
    for relative in sorted(modes):
        if relative.endswith("/"):
            (to / relative).mkdir(parents=True, exist_ok=True)
    for relative, mode in sorted(modes.items(), key=lambda item: -item[0].count("/")):
        (to / relative).chmod(int(mode, 8))


@pytest.fixture(params=[(r, n) for r in RELEASES for n in NODES], ids="-".join)
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Node:
    release, name = request.param
    fixture = FIXTURES / release
    copy_release(fixture, tmp_path)
    return Node(fixture, tmp_path / name, json.loads((fixture / "release.json").read_text()))


@pytest.fixture(params=RELEASES)
def ours(request: pytest.FixtureRequest, tmp_path: Path) -> Node:
    """The node of our own cards, where libvgpu made a region, a host-pids file and a board."""
    fixture = FIXTURES / request.param
    copy_release(fixture, tmp_path)
    return Node(fixture, tmp_path / "node", json.loads((fixture / "release.json").read_text()))


def test_there_is_a_fixture_of_the_previous_release() -> None:
    """Moving PREVIOUS_RELEASE to the next release (the kind tier builds it, the fixtures script
    writes its files) needs that release's fixture too, and both name the same one."""
    root = FIXTURES.parents[2]
    named = set()
    for source in (root / "scripts" / "ondisk_fixtures.py", root / "e2e" / "kind" / "releases.py"):
        found = re.search(r'^PREVIOUS_RELEASE = "([0-9a-f]+)"', source.read_text(), re.MULTILINE)
        assert found is not None, source
        named.add(found.group(1))
    assert len(named) == 1
    assert named <= set(RELEASES)


def test_the_agent_restores_the_checkpoint_and_changes_nothing_on_disk(node: Node) -> None:
    before = node.files()
    agent = node.agent()
    agent.start()
    agent.close()
    assert sorted(claim.uid for claim in agent.snapshot()) == node.claims
    assert node.files() == before


def test_prepare_answers_with_the_devices_the_release_answered(node: Node) -> None:
    agent = node.agent()
    agent.start()
    results = agent.prepare(node.refs())
    agent.close()
    answered = {uid: [d.model_dump(mode="json") for d in r.devices] for uid, r in results.items()}
    assert {uid: r.error for uid, r in results.items()} == dict.fromkeys(node.claims)
    assert answered == node.answers()


@pytest.mark.parametrize("when", ["at start", "at Prepare"])
def test_a_wiped_cdi_spec_and_limits_file_come_back_byte_for_byte(node: Node, when: str) -> None:
    """A reboot clears /var/run/cdi; a limits file can be lost with it: both are rewritten from
    the checkpoint exactly as the release wrote them (the running containers mount them)."""
    wanted = node.files()
    agent = node.agent()
    if when == "at Prepare":
        agent.start()
    for uid in node.claims:
        node.layout.spec_path(uid).unlink()
        node.layout.limits_path(uid).unlink()
    if when == "at start":
        agent.start()
    else:
        assert all(r.error is None for r in agent.prepare(node.refs()).values())
    agent.close()
    assert node.files() == wanted
    for uid in node.claims:
        spec = str(node.layout.spec_path(uid).relative_to(node.root))
        assert node.layout.spec_path(uid).read_bytes() == node.original(spec)


def test_unprepare_of_the_releases_claims_leaves_nothing_of_them(node: Node) -> None:
    agent = node.agent()
    agent.start()
    errors = agent.unprepare(node.refs())
    agent.close()
    assert errors == dict.fromkeys(node.claims)
    layout = node.layout
    assert list(layout.cdi_dir.iterdir()) == []
    assert list(layout.limits_dir.iterdir()) == []
    assert list((layout.vgpu_dir / "claims").iterdir()) == []
    assert list(claimdirs.trash_dir(layout).iterdir()) == []
    checkpoint = json.loads((node.root / "plugin" / "checkpoint.json").read_text())
    assert checkpoint["claims"] == {}
    # the node's priority boards serve every claim: they stay until the agent is uninstalled
    boards = sorted(p.name for p in (node.fixture / node.root.name / "vgpu" / "priority").glob("*"))
    assert sorted(p.name for p in layout.priority_dir.iterdir()) == boards


def test_the_region_the_releases_libvgpu_made_reads_as_it_wrote_it(ours: Node) -> None:
    """One device (the claim's card), one allocation refused over the limit, no live process."""
    region_claim, uuid = ours.claims[0], ours.release["gpus"][0]
    usage = read_region_file(ours.layout.shared_dir(region_claim) / "vgpu.cache")
    assert usage.used == {uuid: 0}
    assert usage.refused == {uuid: 1}
    assert (usage.processes, usage.by_process) == (0, {})


def test_the_host_pids_file_today_writes_is_the_one_the_release_wrote(ours: Node) -> None:
    """libvgpu of the release reads the file today's agent keeps: same table, same bytes, and
    the file is left alone (not rewritten) while the table does not change."""
    table = {(pid, start): host for pid, start, host in ours.release["hostPids"]}
    path = ours.layout.shared_dir(ours.claims[0]) / hostpids.FILE
    assert hostpids.format_host_pids(table) == path.read_bytes()
    assert hostpids.content_to_write(table, path.read_bytes()) is None


def test_the_releases_priority_boards_are_kept(ours: Node) -> None:
    priority = ours.layout.priority_dir
    before = sorted(p.name for p in priority.iterdir())
    assert claimdirs.clean_priority_dir(priority, ours.release["gpus"]) == []
    assert sorted(p.name for p in priority.iterdir()) == before != []
