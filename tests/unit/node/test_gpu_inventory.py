"""Which cards NVML lists are shareable: a card in MIG mode is skipped with its reason, and the
others keep their NVML index (and so their device names)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from vgpu_bridge.node.gpus import (
    MIG_ENABLED,
    MIG_MODE_UNKNOWN,
    Inventory,
    SkippedGpu,
    nvml_gpus,
    nvml_inventory,
)

NOT_SUPPORTED, FUNCTION_NOT_FOUND, UNKNOWN = 3, 13, 999


class NvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _nvml(mig_modes: list[object], **overrides: Any) -> SimpleNamespace:
    """pynvml's API over len(mig_modes) cards; a mode that is an int is NVML's error for it."""

    def mig_mode(handle: int) -> tuple[int, int]:
        mode = mig_modes[handle]
        if isinstance(mode, int):
            raise NvmlError(mode)
        return (1, 1) if mode == "on" else (0, 0)

    nvml = SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "570.124.06",
        nvmlDeviceGetCount=lambda: len(mig_modes),
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetMigMode=mig_mode,
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetName=lambda h: "NVIDIA H100",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=80 * 2**30),
        nvmlDeviceGetMinorNumber=lambda h: h,
        nvmlDeviceGetArchitecture=lambda h: 9,
    )
    for name, value in overrides.items():
        setattr(nvml, name, value)
    return nvml


def test_a_card_in_mig_mode_is_skipped_and_not_listed_as_shareable() -> None:
    nvml = _nvml(["off", "on"])
    assert [gpu.uuid for gpu in nvml_gpus(nvml)] == ["GPU-0"]
    assert nvml_inventory(nvml).skipped == (SkippedGpu(index=1, uuid="GPU-1", reason=MIG_ENABLED),)


def test_a_skipped_card_keeps_its_index_so_its_neighbours_keep_their_device_names() -> None:
    inventory = nvml_inventory(_nvml(["on", "off", "on", "off"]))
    assert [gpu.device_name for gpu in inventory.gpus] == ["gpu-1", "gpu-3"]
    assert [card.index for card in inventory.skipped] == [0, 2]


def test_a_pending_mig_mode_does_not_skip_a_card_that_runs_whole_until_its_reset() -> None:
    nvml = _nvml(["off"], nvmlDeviceGetMigMode=lambda h: (0, 1))
    assert nvml_inventory(nvml) == Inventory(gpus=nvml_gpus(nvml), skipped=())
    assert len(nvml_gpus(nvml)) == 1


@pytest.mark.parametrize("error", [NOT_SUPPORTED, FUNCTION_NOT_FOUND], ids=["card", "driver"])
def test_a_card_or_driver_without_mig_is_a_whole_shareable_card(error: int) -> None:
    assert [gpu.uuid for gpu in nvml_gpus(_nvml([error]))] == ["GPU-0"]


def test_a_pynvml_without_the_mig_call_lists_every_card() -> None:
    nvml = _nvml(["on"])
    del nvml.nvmlDeviceGetMigMode
    assert len(nvml_gpus(nvml)) == 1


def test_a_card_whose_mig_mode_nvml_cannot_tell_is_skipped_not_shared() -> None:
    inventory = nvml_inventory(_nvml(["off", UNKNOWN]))
    assert [gpu.uuid for gpu in inventory.gpus] == ["GPU-0"]
    assert inventory.skipped == (SkippedGpu(index=1, uuid="GPU-1", reason=MIG_MODE_UNKNOWN),)


def test_a_skipped_card_is_asked_nothing_a_mig_card_cannot_answer() -> None:
    def no_whole_card_memory(handle: int) -> object:
        if handle == 1:
            raise NvmlError(NOT_SUPPORTED)
        return SimpleNamespace(total=2**30)

    nvml = _nvml(["off", "on"], nvmlDeviceGetMemoryInfo=no_whole_card_memory)
    assert [gpu.uuid for gpu in nvml_gpus(nvml)] == ["GPU-0"]
