"""The words an Event uses for a claim on NVIDIA's driver (profile nvidia): the card's memory,
its shares as the percent of the SMs they book, and our enforcer that holds the container to
them, with the SM limit it applies (never a "card" of its own)."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.core import ENFORCER_DRIVER, ENFORCER_REQUEST, nvidia_profile
from vgpu_bridge.core.opaque_config import GpuShareConfig
from vgpu_bridge.webhook.event_notes import claim_text

NVIDIA_CLASS = "gpu.nvidia.com"


def share(count: int = 1, **capacity: str) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": NVIDIA_CLASS, "count": count}
    if capacity:
        body["capacity"] = {"requests": capacity}
    return {"name": "gpu", "exactly": body}


def spec(*requests: dict[str, Any], cores: int | None = None) -> dict[str, Any]:
    enforcer = {"name": ENFORCER_REQUEST,
                "exactly": {"deviceClassName": ENFORCER_DRIVER, "count": 1}}  # fmt: skip
    parameters = GpuShareConfig(cores=cores).to_parameters()
    config = {"requests": [ENFORCER_REQUEST],
              "opaque": {"driver": ENFORCER_DRIVER, "parameters": parameters}}  # fmt: skip
    return {"devices": {"requests": [*requests, enforcer], "config": [config]}}


CASES = [
    pytest.param("100", spec(share(memory="3000Mi", shares="30"), cores=30),
                 f"1 card, 3000 MiB, 30% cores (30 of 100 shares), held to it by {ENFORCER_DRIVER} "
                 "(SM limit 30%)", id="100-shares"),
    pytest.param("4", spec(share(memory="3000Mi", shares="2"), cores=40),
                 f"1 card, 3000 MiB, 50% cores (2 of 4 shares), held to it by {ENFORCER_DRIVER} "
                 "(SM limit 40%)", id="4-shares-rounded-up"),
    pytest.param("100", spec(share(memory="3000Mi"), cores=0),
                 f"1 card, 3000 MiB, 1% cores (1 of 100 shares), held to it by {ENFORCER_DRIVER} "
                 "(no SM limit)", id="no-gpucores-one-share"),
    pytest.param("memory", spec(share(memory="3000Mi"), cores=30),
                 f"1 card, 3000 MiB, SMs not booked, held to it by {ENFORCER_DRIVER} "
                 "(SM limit 30%)", id="memory-mode"),
    pytest.param("memory", spec(share()),
                 f"1 card, whole memory, SMs not booked, held to it by {ENFORCER_DRIVER} "
                 "(no SM limit)", id="memory-mode-whole-card"),
    pytest.param("unlimited", spec(share(2, memory="1Gi"), cores=10),
                 f"2 cards, 1024 MiB, SMs not booked each, held to them by {ENFORCER_DRIVER} "
                 "(SM limit 10%)", id="unlimited-two-cards"),
    pytest.param("100", {"devices": {"requests": [share(memory="1Gi", shares="5")]}},
                 "1 card, 1024 MiB, 5% cores (5 of 100 shares), NOT held to it: no request of "
                 f"{ENFORCER_DRIVER}", id="without-the-enforcer"),
]  # fmt: skip


@pytest.mark.parametrize(("mode", "claim", "text"), CASES)
def test_claim_text_says_what_an_nvidia_share_books_and_who_holds_it(
    mode: str, claim: dict[str, Any], text: str
) -> None:
    assert claim_text(claim, profile=nvidia_profile(mode)) == text


def test_a_hostile_enforcer_config_is_read_as_no_sm_limit_known() -> None:
    claim = spec(share(memory="1Gi", shares="5"))
    claim["devices"]["config"][0]["opaque"]["parameters"] = {"cores": "all"}
    assert claim_text(claim, profile=nvidia_profile()).endswith(
        f"held to it by {ENFORCER_DRIVER} (SM limit unreadable)"
    )
