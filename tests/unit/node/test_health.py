"""/healthz's verdict: the sockets first, then the last publication, then how long none ended."""

from __future__ import annotations

import pytest

from tests.unit.node.claims import GPUS, NODE
from tests.unit.node.fake_api import FakeApi
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeError
from vgpu_bridge.node.health import Health
from vgpu_bridge.node.publisher import Publication, PublishError, SlicePublisher

STARTED = 1000.0
SILENCE = 150.0


class Clock:
    def __init__(self) -> None:
        self.now = STARTED

    def __call__(self) -> float:
        return self.now


CASES = [
    pytest.param("", None, 10, None, id="no-publication-yet-within-the-grace"),
    pytest.param(
        "", None, 151,
        "no ResourceSlice publication has succeeded for 151 s since the agent started "
        "(allowed: 150 s)",
        id="no-publication-yet-past-the-grace",
    ),
    pytest.param(
        "", Publication(STARTED + 100, None, STARTED + 100), 240, None, id="published-recently"
    ),
    pytest.param(
        "", Publication(STARTED + 100, None, STARTED + 100), 260,
        "no ResourceSlice publication has succeeded for 160 s since the last one (allowed: 150 s)",
        id="the-publisher-went-quiet",
    ),
    pytest.param(
        "", Publication(STARTED + 5, "HTTP 500: etcd", None), 6, None,
        id="a-failure-within-the-grace-is-healthy",
    ),
    pytest.param(
        "", Publication(STARTED + 200, "HTTP 500: etcd", STARTED + 50), 201,
        "no ResourceSlice publication has succeeded for 151 s since the last one "
        "(allowed: 150 s); last error: HTTP 500: etcd",
        id="failures-past-the-grace-name-the-last-error",
    ),
    pytest.param(
        "", Publication(STARTED + 200, "HTTP 500: etcd", None), 200,
        "no ResourceSlice publication has succeeded for 200 s since the agent started "
        "(allowed: 150 s); last error: HTTP 500: etcd",
        id="never-succeeded",
    ),
    pytest.param(
        "the DRA socket /p/dra.sock is gone", Publication(STARTED + 5, None, STARTED + 5), 6,
        "the DRA socket /p/dra.sock is gone",
        id="a-socket-problem-comes-first",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("sockets", "last", "after_s", "expected"), CASES)
def test_health_names_the_first_problem_or_none(
    sockets: str, last: Publication | None, after_s: float, expected: str | None
) -> None:
    clock = Clock()
    health = Health(
        sockets=lambda: sockets or None,
        publications=lambda: last,
        max_silence_s=SILENCE,
        clock=clock,
    )
    clock.now = STARTED + after_s
    assert health.problem() == expected


def test_the_publisher_records_how_each_sync_ended() -> None:
    api, clock = FakeApi(), Clock()
    publisher = SlicePublisher(api, node=NODE, profile=DEFAULT, gpus=GPUS, clock=clock)
    assert publisher.last is None
    publisher.sync()
    assert publisher.last == Publication(STARTED, None, STARTED)
    api.broken = KubeError("GET", "/api/v1/nodes/node-a", 500, "etcdserver: request timed out")
    clock.now += 30
    with pytest.raises(PublishError):
        publisher.sync()
    assert publisher.last is not None
    assert publisher.last.finished_at == STARTED + 30
    assert publisher.last.succeeded_at == STARTED  # the last good one is remembered
    assert "HTTP 500: etcdserver: request timed out" in str(publisher.last.error)
    api.broken = ConnectionRefusedError(111, "Connection refused")  # not a KubeError: also kept
    with pytest.raises(ConnectionRefusedError):
        publisher.sync()
    assert publisher.last.error == "[Errno 111] Connection refused"
    api.broken = None
    publisher.sync()
    assert publisher.last == Publication(STARTED + 30, None, STARTED + 30)
