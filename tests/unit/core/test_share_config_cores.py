"""`GpuShareConfig.cores`: the SM limit a share on NVIDIA's driver asked for, carried to our
enforcer in the claim's opaque config."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.core.opaque_config import (
    API_VERSION,
    KIND,
    GpuShareConfig,
    ShareConfigError,
    parse_share_config,
)

IDENTITY = {"apiVersion": API_VERSION, "kind": KIND}


@pytest.mark.parametrize("cores", [0, 1, 30, 100, None])
def test_cores_survive_the_round_trip_through_the_parameters(cores: int | None) -> None:
    config = GpuShareConfig(cores=cores, priority=1)
    assert parse_share_config(config.to_parameters()) == config


def test_cores_are_written_when_set_even_when_zero() -> None:
    assert GpuShareConfig(cores=0).to_parameters() == {**IDENTITY, "cores": 0}
    assert GpuShareConfig().to_parameters() == IDENTITY


BAD: list[tuple[str, Any, str]] = [
    ("a boolean", True, "cores: must be a whole percent 0..100, got True"),
    ("below range", -1, "got -1"),
    ("above range", 101, "got 101"),
    ("a string", "5", "got '5'"),
    ("a float", 5.0, "got 5.0"),
]


@pytest.mark.parametrize(("case", "cores", "message"), BAD, ids=[b[0] for b in BAD])
def test_cores_that_are_not_a_whole_percent_are_refused_naming_the_field(
    case: str, cores: Any, message: str
) -> None:
    with pytest.raises(ShareConfigError, match=message):
        parse_share_config({**IDENTITY, "cores": cores})
    with pytest.raises(ShareConfigError, match=message):
        GpuShareConfig(cores=cores)
