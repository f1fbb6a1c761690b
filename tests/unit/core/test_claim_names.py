"""The claim a translated container gets in its pod."""

from __future__ import annotations

from vgpu_bridge.core.translate import pod_claim_name


def test_pod_claim_names_stay_dns_labels() -> None:
    assert pod_claim_name("main") == "gpu-main"
    long = pod_claim_name("c" * 63)
    assert len(long) <= 63
    assert long != pod_claim_name("c" * 62 + "d")
