"""In enforcer mode a Prepare reads NVIDIA's slices (up to ~20 s a page with retries when the API
is slow) before it takes the node's state lock, as it reads its claim: a slow read holds up no
Unprepare or Prepare of another claim (R1's review of issue 37, finding 3)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.unit.node.claims import NODE
from tests.unit.node.nvidia_claims import enforcer_result, nvidia_claim, nvidia_result, nvidia_slice
from vgpu_bridge.core.profiles import ENFORCER_DRIVER, our_profile
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.nvidia_slices import NvidiaCards
from vgpu_bridge.node.state import ClaimRef, DeviceState

Json = dict[str, Any]
FIRST = ClaimRef("team-a", "first", "0c1a1d00-0000-4000-8000-00000000000a")
SECOND = ClaimRef("team-a", "second", "0c1a1d00-0000-4000-8000-00000000000b")
WAIT_S = 30.0  # only a bound on a hang: every wait below ends as soon as its event is set


class ClaimsApi(KubeApi):
    """The two claims, FIRST on NVIDIA's gpu-0 and SECOND on gpu-1."""

    def __init__(self) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self.claims = {
            ref.api_path: nvidia_claim(
                nvidia_result(device), enforcer_result(), uid=ref.uid, name=ref.name
            )
            for ref, device in ((FIRST, "gpu-0"), (SECOND, "gpu-1"))
        }

    def get(self, path: str) -> Json:
        return copy.deepcopy(self.claims[path])


class SlowSlices:
    """NVIDIA's slice; once `hold` is set, a read blocks until `release` is set. `now`: the
    cache's clock, which the test moves past MIN_REFRESH_S."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.hold = False
        self.reading = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> list[Json]:
        if self.hold:
            self.reading.set()
            self.release.wait(WAIT_S)
        return [nvidia_slice()]


@pytest.fixture
def state(tmp_path: Path) -> Iterator[tuple[DeviceState, SlowSlices]]:
    slices = SlowSlices()
    cards = NvidiaCards(slices, node=NODE, max_age_s=0, clock=lambda: slices.now)  # always old
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu",
                       driver=ENFORCER_DRIVER, enforcer=True)  # fmt: skip
    state = DeviceState(ClaimsApi(), node=NODE, profile=our_profile(ENFORCER_DRIVER), gpus=(),
                        layout=layout, checkpoint_file=tmp_path / "p" / "checkpoint.json",
                        nvidia_cards=cards)  # fmt: skip
    state.start()
    yield state, slices
    slices.release.set()
    state.close()


def test_a_slow_read_of_nvidias_slice_holds_up_no_unprepare_of_another_claim(
    state: tuple[DeviceState, SlowSlices],
) -> None:
    devices, slices = state
    assert devices.prepare([FIRST])[FIRST.uid].error is None
    slices.hold, slices.now = True, slices.now + 2  # SECOND's Prepare must read the slice again
    prepared: dict[str, Any] = {}
    preparing = threading.Thread(target=lambda: prepared.update(devices.prepare([SECOND])))
    preparing.start()
    assert slices.reading.wait(WAIT_S)  # SECOND's Prepare is reading NVIDIA's slice now
    unprepared = threading.Event()
    answers: dict[str, str | None] = {}

    def unprepare() -> None:
        answers.update(devices.unprepare([FIRST]))
        unprepared.set()

    threading.Thread(target=unprepare, daemon=True).start()
    done = unprepared.wait(WAIT_S)  # before the read is let go
    slices.release.set()
    preparing.join(WAIT_S)
    assert done, "the Unprepare waited for another claim's read of NVIDIA's slice"
    assert answers == {FIRST.uid: None}
    assert prepared[SECOND.uid].error is None
