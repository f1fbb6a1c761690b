"""What each ``--consumable-shares`` mode of NVIDIA's plugin publishes and what a HAMi share
consumes there (docs/reference/nvidia-dra-driver.md §1.3; the translation rules of issue 37):
the scenarios' expectations for the mode a run was made with (``NVIDIA_CONSUMABLE_SHARES``,
default ``100``, which must equal the chart's ``nvidiaDriver.consumableShares``)."""

from __future__ import annotations

import math
import os
from typing import Any

from vgpu_bridge.core import nvidia_profile

Json = dict[str, Any]
MODE_ENV = "NVIDIA_CONSUMABLE_SHARES"
DEFAULT_MODE = "100"


def mode_from_env() -> str:
    """The run's mode; ValueError (from the nvidia profile) naming a value NVIDIA refuses too."""
    mode = os.environ.get(MODE_ENV) or DEFAULT_MODE
    nvidia_profile(mode)
    return mode


def shares_per_card(mode: str) -> int | None:
    return nvidia_profile(mode).shares_per_card


def card_capacity(mode: str, card_memory: str) -> Json:
    """A full GPU's ``capacity`` in NVIDIA's slice: ``memory`` with the mode's request policy
    (whole card by default in ``memory`` mode, 0 otherwise) and, in the ``<N>`` mode, ``shares``."""
    whole_card = mode == "memory"
    memory_range = {"min": "1Mi" if whole_card else "0", "max": card_memory, "step": "1Mi"}
    capacity: Json = {
        "memory": {
            "value": card_memory,
            "requestPolicy": {
                "default": card_memory if whole_card else "0",
                "validRange": memory_range,
            },
        }
    }
    shares = shares_per_card(mode)
    if shares is not None:
        capacity["shares"] = {
            "value": str(shares),
            "requestPolicy": {
                "default": "1",
                "validRange": {"min": "1", "max": str(shares), "step": "1"},
            },
        }
    return capacity


def consumed(mode: str, gpumem_mib: int, gpucores: int) -> Json:
    """What a share of ``gpumem_mib`` and ``gpucores`` consumes of NVIDIA's card: its memory, and
    in the ``<N>`` mode ``ceil(cores * N / 100)`` shares."""
    found: Json = {"memory": f"{gpumem_mib}Mi"}
    shares = shares_per_card(mode)
    if shares is not None and gpucores > 0:
        found["shares"] = str(math.ceil(gpucores * shares / 100))
    return found


def sm_limit(mode: str, gpucores: int) -> int:
    """The SM limit our enforcer applies: the cores asked, capped by the booked shares' percent
    in the ``<N>`` mode (which, booked as ``ceil``, never falls below the cores asked)."""
    shares = shares_per_card(mode)
    if shares is None or gpucores == 0:
        return gpucores
    booked = math.ceil(gpucores * shares / 100)
    percent = 100 if booked >= shares else max(1, booked * 100 // shares)
    return min(gpucores, percent)
