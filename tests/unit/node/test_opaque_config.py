"""`GpuShareConfig`, the opaque config core writes into claims and the node agent reads back."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.node.claims import BY_NAME, NODE, UID, allocated_claim
from vgpu_bridge.core import DEFAULT, HAMI, DeviceFilter, DriverProfile, GpuRequest, Inventory
from vgpu_bridge.core.claims import claim_spec
from vgpu_bridge.core.models import Problems
from vgpu_bridge.core.opaque_config import (
    API_VERSION,
    KIND,
    GpuShareConfig,
    ShareConfigError,
    parse_share_config,
)
from vgpu_bridge.node.allocation import ClaimError, claim_shares

# what core wrote into every claim with a priority before the config had a type
OLD_SHAPE = {"apiVersion": "gpu.vgpu-bridge.io/v1alpha1", "kind": "GpuShareConfig", "priority": 1}


def _emitted_config(priority: int, profile: DriverProfile = DEFAULT) -> dict[str, Any] | None:
    """The opaque parameters core puts into the claim of a 3000 MiB share with this priority."""
    request = GpuRequest(count=1, memory_mib=3000, cores=0, priority=priority)
    spec = claim_spec(request, DeviceFilter(), profile=profile, inventory=Inventory(),
                      percent_path="x", problems=Problems())  # fmt: skip
    assert spec is not None
    configs = spec["devices"].get("config")
    if configs is None:
        return None
    (config,) = configs
    assert config["opaque"]["driver"] == profile.driver
    return dict(config["opaque"]["parameters"])


@pytest.mark.parametrize("priority", [0, 1, None])
def test_a_config_survives_the_round_trip_through_its_parameters(priority: int | None) -> None:
    config = GpuShareConfig(priority=priority)
    assert parse_share_config(config.to_parameters()) == config


def test_what_core_emits_is_what_the_node_reads() -> None:
    parameters = _emitted_config(0)
    assert parameters == {"apiVersion": API_VERSION, "kind": KIND, "priority": 0}
    claim = allocated_claim(config=[{"requests": ["gpu"], "opaque": {
        "driver": DEFAULT.driver, "parameters": parameters}}])  # fmt: skip
    shares = claim_shares(claim, uid=UID, node=NODE, profile=DEFAULT, gpus=BY_NAME)
    assert shares.priority == 0


def test_the_shape_written_before_the_type_still_reads() -> None:
    assert parse_share_config(OLD_SHAPE) == GpuShareConfig(priority=1)
    assert _emitted_config(1) == OLD_SHAPE


BAD = [
    ("unknown field", {**OLD_SHAPE, "timeSlice": "long"}, "timeSlice: unknown field"),
    ("priority above range", {**OLD_SHAPE, "priority": 2}, "priority: must be 0 .* got 2"),
    ("priority below range", {**OLD_SHAPE, "priority": -1}, "priority: must be 0 .* got -1"),
    ("priority a string", {**OLD_SHAPE, "priority": "1"}, "priority: must be 0 .* got '1'"),
    ("priority a boolean", {**OLD_SHAPE, "priority": True}, "priority: must be 0 .* got True"),
    (
        "other kind",
        {**OLD_SHAPE, "kind": "GpuConfig"},
        "apiVersion/kind: expected .* got '.*' 'GpuConfig'",
    ),
    ("other version", {**OLD_SHAPE, "apiVersion": f"{API_VERSION}9"}, "apiVersion/kind: "),
    ("no identity", {"priority": 1}, "apiVersion/kind: expected .* got None None"),
    ("not an object", ["priority", 1], "must be an object, got list"),
    ("identity a list", {**OLD_SHAPE, "apiVersion": [API_VERSION]}, "got a list 'GpuShareConfig'"),
    ("huge value", {**OLD_SHAPE, "priority": "9" * 5000}, r"got '9{56}\.\.\.$"),
]


@pytest.mark.parametrize(("case", "parameters", "message"), BAD, ids=[b[0] for b in BAD])
def test_a_config_we_cannot_honour_is_refused_naming_the_field(
    case: str, parameters: object, message: str
) -> None:
    with pytest.raises(ShareConfigError, match=message):
        parse_share_config(parameters)


def test_the_node_refuses_a_bad_config_naming_the_claim_and_the_field() -> None:
    parameters = {**OLD_SHAPE, "priority": 0, "extra": 1}
    claim = allocated_claim(
        config=[{"opaque": {"driver": DEFAULT.driver, "parameters": parameters}}]
    )
    with pytest.raises(ClaimError) as caught:
        claim_shares(claim, uid=UID, node=NODE, profile=DEFAULT, gpus=BY_NAME)
    assert str(caught.value) == (
        "ResourceClaim team-a/pod-gpu-x1: status.allocation.devices.config[0].opaque.parameters: "
        "extra: unknown field"
    )


def test_a_driver_that_reads_no_config_gets_none() -> None:
    assert _emitted_config(0, HAMI) is None
