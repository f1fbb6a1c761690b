"""Crafted NodePrepareResources / NodeUnprepareResources against the real agent process: uids
and names that are paths, queries or huge; a thousand claims in one call. Each claim gets its
own answer, nothing outside the agent's own dirs is deleted, no hostile name reaches an API
URL, and the agent serves afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.abuse.agent import Agent, AgentDirs, agent_dirs, claim, running_agent
from tests.abuse.fake_api import FakeApi, fake_api
from tests.abuse.processes import non_json_lines
from vgpu_bridge.node.kubeletapi import dra_v1_pb2

MANY = 1000


@pytest.fixture
def node_api() -> Iterator[FakeApi]:
    with fake_api() as api:
        yield api


@pytest.fixture
def dirs() -> Iterator[AgentDirs]:
    with agent_dirs() as made:
        yield made


@pytest.fixture
def agent(dirs: AgentDirs, node_api: FakeApi) -> Iterator[Agent]:
    with running_agent(dirs, node_api) as running:
        yield running


def plant_canaries(dirs: AgentDirs) -> dict[str, list[Path]]:
    """Files a hostile uid would reach, each inside `base` (never above it), by uid."""
    dirs.vgpu.mkdir(parents=True, exist_ok=True)
    targets = {
        "..": dirs.vgpu / "libvgpu.so",  # claims/.. is the vgpu dir itself
        "../../keep": dirs.root / "keep" / "file",
        "../../../canary": dirs.base / "canary" / "file",
        "../../keep/limit": dirs.root / "keep" / "limit.conf",  # as limits/<uid>.conf
        str(dirs.base / "absolute"): dirs.base / "absolute" / "file",
        "../limits": dirs.vgpu / "limits" / "other.conf",
    }
    for path in targets.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("canary")
    return {uid: [path] for uid, path in targets.items()}


HOSTILE_UIDS = (".", "", "/", "a/../../..", "x" * 10_000, "\x00", "\u202e..", "%2e%2e", "../")
HOSTILE_NAMES = ("../../../../api/v1/pods", "?watch=true", "a/b", "x" * 300, "UPPER", "..", "%2e",
                 "c#frag", "\u00e4", "")  # fmt: skip
HOSTILE_NAMESPACES = ("../x", "kube-system/../team-b", "?watch=true", "", "a/b", "x" * 100)


def hostile_claims(canaries: dict[str, list[Path]]) -> list[dra_v1_pb2.Claim]:
    claims = [dra_v1_pb2.Claim(namespace="team-a", name="c", uid=u) for u in canaries]
    claims += [dra_v1_pb2.Claim(namespace="team-a", name="c", uid=u) for u in HOSTILE_UIDS]
    claims += [dra_v1_pb2.Claim(namespace="team-a", name=n, uid=str(uuid.uuid4()))
               for n in HOSTILE_NAMES]  # fmt: skip
    claims += [dra_v1_pb2.Claim(namespace=ns, name="c", uid=str(uuid.uuid4()))
               for ns in HOSTILE_NAMESPACES]  # fmt: skip
    return claims


def test_hostile_uids_and_names_fail_per_claim_and_delete_nothing_outside_the_agents_dirs(
    agent: Agent, dirs: AgentDirs, node_api: FakeApi
) -> None:
    canaries = plant_canaries(dirs)
    claims = hostile_claims(canaries)
    prepared = agent.prepare(claims)
    unprepared = agent.unprepare(claims)
    agent.unprepare([dra_v1_pb2.Claim(namespace="team-a", name="c", uid=u) for u in canaries])
    missing = [f"{uid!r}: {path}" for uid, paths in canaries.items() for path in paths
               if not path.exists()]  # fmt: skip
    assert not missing, f"deleted by a hostile Unprepare: {missing}"
    unanswered = {c.uid for c in claims} - set(prepared)
    assert not unanswered, f"no answer for {sorted(unanswered)[:5]}"
    granted = [uid for uid, answer in prepared.items() if answer.devices or not answer.error]
    assert not granted, f"prepared hostile claims: {granted[:5]}"
    assert set(unprepared) == set(prepared)
    assert not node_api.unsafe_requests(), node_api.unsafe_requests()[:10]
    assert agent.serves()
    assert not non_json_lines(agent.log_file), non_json_lines(agent.log_file)[:5]


def test_a_thousand_claims_in_one_call_each_get_an_answer_and_the_agent_serves_after(
    agent: Agent, node_api: FakeApi
) -> None:
    good = [claim(node_api, f"good-{i}", device=f"gpu-{i % 2}") for i in range(20)]
    unknown = [dra_v1_pb2.Claim(namespace="team-a", name=f"gone-{i}", uid=str(uuid.uuid4()))
               for i in range(MANY - len(good))]  # fmt: skip
    answers = agent.prepare(good + unknown)
    assert set(answers) == {c.uid for c in good + unknown}
    assert all(answers[c.uid].devices and not answers[c.uid].error for c in good)
    assert all(answers[c.uid].error and not answers[c.uid].devices for c in unknown)
    assert agent.unprepare(good + unknown) == dict.fromkeys(answers, "")
    fresh = claim(node_api, "after")
    assert agent.prepare([fresh])[fresh.uid].devices
    assert agent.serves()
