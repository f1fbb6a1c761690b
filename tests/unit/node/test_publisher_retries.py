"""A publication that failed (the API server down) is tried again soon, backing off to the
resync period: what the agent meant to publish meanwhile (a card's taint) is not left for a
whole period after the server's return, and a server that keeps failing is not hammered."""

from __future__ import annotations

from tests.unit.node.claims import GPUS, NODE
from tests.unit.node.fake_api import FakeApi
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.app import every
from vgpu_bridge.node.publisher import SlicePublisher

RESYNC_S = 30.0


class Stop:
    """Records each wait and returns at once; the API server comes back after `down_for`
    waits, and the loop stops after `runs` of them."""

    def __init__(self, api: FakeApi, *, down_for: int, runs: int) -> None:
        self.api, self.down_for, self.runs = api, down_for, runs
        self.waits: list[float] = []

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        if len(self.waits) == self.down_for:
            self.api.broken = None
        return len(self.waits) == self.runs


def publish_through_outage(*, down_for: int, runs: int) -> list[float]:
    api = FakeApi()
    api.broken = ConnectionRefusedError(111, "Connection refused")
    publisher = SlicePublisher(api, node=NODE, profile=DEFAULT, gpus=GPUS)
    stop = Stop(api, down_for=down_for, runs=runs)
    every(RESYNC_S, stop, "publishing slices", publisher.sync,  # type: ignore[arg-type]
          again_soon=publisher.failing, soon_s=publisher.retry_in_s)  # fmt: skip
    assert not publisher.failing()
    return stop.waits


def test_a_failed_publication_is_tried_again_after_1_2_4_s_then_each_resync_once_it_works() -> None:
    assert publish_through_outage(down_for=4, runs=6) == [1, 2, 4, 8, RESYNC_S, RESYNC_S]


def test_the_retries_never_wait_longer_than_the_resync_period() -> None:
    assert publish_through_outage(down_for=6, runs=7) == [1, 2, 4, 8, 16, RESYNC_S, RESYNC_S]
