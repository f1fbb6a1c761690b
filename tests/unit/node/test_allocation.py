"""Reading a claim's shares: exact sizes from consumedCapacity, and every bad input refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.node.claims import BY_NAME, NODE, allocated_claim, result
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.allocation import ClaimError, claim_shares


def _shares(claim: dict[str, Any], uid: str = "0c1a1d00-0000-4000-8000-000000000001") -> Any:
    return claim_shares(claim, uid=uid, node=NODE, profile=DEFAULT, gpus=BY_NAME)


def test_shares_come_from_consumed_capacity_in_allocation_order() -> None:
    claim = allocated_claim(
        result("gpu-1", request="gpu/h100", memory="2Gi", cores="0"),
        result("gpu-0", memory="3000Mi", cores="30", share_id=None),
        priority=1,
    )
    shares = _shares(claim)
    assert [(s.device, s.request, s.memory_mib, s.cores) for s in shares.shares] == [
        ("gpu-1", "gpu", 2048, 0),
        ("gpu-0", "gpu", 3000, 30),
    ]
    assert shares.shares[1].share_id is None
    assert shares.priority == 1
    assert (shares.namespace, shares.name, shares.uid) == (
        "team-a",
        "pod-gpu-x1",
        "0c1a1d00-0000-4000-8000-000000000001",
    )


def test_results_of_other_drivers_are_not_ours() -> None:
    other = {**result(), "driver": "gpu.example.com", "device": "whatever"}
    assert [s.device for s in _shares(allocated_claim(other, result())).shares] == ["gpu-0"]


def test_a_whole_card_share_is_the_whole_card() -> None:
    shares = _shares(allocated_claim(result(memory="80Gi", cores="100")))
    assert (shares.shares[0].memory, shares.shares[0].cores) == (80 * 2**30, 100)


BAD = [
    (
        "replaced",
        allocated_claim(uid="0c1a1d00-0000-4000-8000-000000000002"),
        "has uid 0c1a1d00-0000-4000-8000-000000000002, not 0c1a1d00-0000-4000-8000-000000000001",
    ),
    ("not allocated", {**allocated_claim(), "status": {}}, "is not allocated"),
    (
        "other driver",
        allocated_claim({**result(), "driver": "gpu.example.com"}),
        "has no device of driver gpu.vgpu-bridge.io",
    ),
    ("other node", allocated_claim(node="node-b"), r"allocated to node \['node-b'\], not node-a"),
    ("other pool", allocated_claim(result(pool="node-b")), "pool 'node-b' is not this node"),
    ("unknown device", allocated_claim(result("gpu-7")), "device 'gpu-7' is not a GPU"),
    ("no memory", allocated_claim(result(memory=None)), r"no consumedCapacity\[memory\]"),
    ("no cores", allocated_claim(result(cores=None)), r"no consumedCapacity\[cores\]"),
    ("bad quantity", allocated_claim(result(memory="lots")), "is not a quantity"),
    ("too much", allocated_claim(result(memory="81Gi")), "not 1Mi..85899345920"),
    ("off step", allocated_claim(result(memory="1500Ki")), "in 1Mi steps"),
    ("cores > 100", allocated_claim(result(cores="101")), "not a whole percent"),
    (
        "foreign config",
        allocated_claim(
            config=[
                {
                    "opaque": {
                        "driver": DEFAULT.driver,
                        "parameters": {"apiVersion": "x/v1", "kind": "Other"},
                    }
                }
            ]
        ),
        "expected apiVersion gpu.vgpu-bridge.io/v1alpha1",
    ),
    ("bad priority", allocated_claim(priority=5), "priority: must be 0 .* got 5"),
]


@pytest.mark.parametrize(("case", "claim", "message"), BAD, ids=[b[0] for b in BAD])
def test_a_claim_we_cannot_honour_exactly_is_refused_with_a_reason(
    case: str, claim: dict[str, Any], message: str
) -> None:
    with pytest.raises(ClaimError, match=message) as caught:
        _shares(claim)
    assert "team-a/pod-gpu-x1" in str(caught.value)
