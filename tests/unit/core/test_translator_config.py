"""TranslatorConfig and GpuRequest refuse values out of range, naming the field."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from vgpu_bridge.core import TranslatorConfig
from vgpu_bridge.core.config import hami_setting
from vgpu_bridge.core.models import GpuRequest


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"default_cores": 101}, "default_cores: must be an integer 0..100, got 101"),
        ({"default_memory": -1}, "default_memory: must be an integer at least 0, got -1"),
        ({"default_gpu_num": 0}, "default_gpu_num: must be an integer at least 1, got 0"),
        ({"memory_factor": True}, "memory_factor: must be an integer at least 1, got True"),
        ({"allow_privileged": "yes"}, "allow_privileged: must be a boolean, got 'yes'"),
        ({"resource_core_name": "cores"}, "resource_core_name: must match the pattern"),
    ],
)
def test_a_config_out_of_range_names_the_field(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        TranslatorConfig(**values)


def test_every_bad_field_is_named_at_once() -> None:
    with pytest.raises(ValueError, match=r"default_cores: .*; memory_factor: "):
        TranslatorConfig(default_cores=-1, memory_factor=0)


def test_hamis_names_for_the_fields() -> None:
    assert hami_setting("resource_count_name") == ("resourceCountName", "nvidia.com/gpu")
    assert hami_setting("default_gpu_num") == ("defaultGPUNum", 1)


@pytest.mark.parametrize(
    "values",
    [
        {"count": 0},
        {"cores": 101},
        {"priority": 2},
        {"memory_mib": 0},
        {"memory_percent": Decimal(0)},
        {"memory_percent": Decimal(101)},
    ],
)
def test_a_request_out_of_range_is_a_bug_caught_at_once(values: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="GpuRequest"):
        GpuRequest(**{"count": 1, "cores": 0, **values})


def test_a_whole_number_percentage_is_kept_as_a_decimal() -> None:
    request = GpuRequest(count=1, memory_percent=50, cores=0)  # type: ignore[arg-type]
    assert isinstance(request.memory_percent, Decimal)
