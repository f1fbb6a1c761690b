"""The limits file keys GPUs by UUID (issue #25 item 2): a claim on a GPU whose uuid libvgpu could
not key (a mock inventory's free-form uuid) is refused at Prepare with the reason, and nothing is
written, rather than a limits file that would fail every container closed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.integration.node_harness import agent_dirs, running_agent
from tests.unit.node.claims import GPUS, NODE, allocated_claim, result
from vgpu_bridge.node.allocation import ClaimError
from vgpu_bridge.node.state import ClaimRef

UID = "0c1a1d00-0000-4000-8000-0000000002a5"
CLAIM = allocated_claim(result("gpu-0", memory="3000Mi", cores="30"), uid=UID, name="c")
REF = ClaimRef("team-a", "c", UID)


def test_a_gpu_uuid_libvgpu_cannot_key_fails_the_claims_prepare_with_the_reason() -> None:
    gpus = (replace(GPUS[0], uuid="GPU_0 #1"), GPUS[1])
    with agent_dirs() as dirs, running_agent(dirs, gpus, node=NODE) as agent:
        with pytest.raises(ClaimError, match="cannot write the limits file: GPU uuid 'GPU_0 #1'"):
            agent.state.plan(CLAIM, REF)
        assert not dirs.layout.limits_path(UID).exists()
