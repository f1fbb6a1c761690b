"""The manifests HAMi users run today (../shared/upstream-examples/hami) translate, or are refused
where DESIGN §3 says so."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli_runner import run_cli

#: HAMi's own example manifests are not ours to commit: they are read from the reference checkout
#: beside the repository (`../shared`), or from where VGPU_BRIDGE_UPSTREAM_EXAMPLES points
EXAMPLES = Path(
    os.environ.get("VGPU_BRIDGE_UPSTREAM_EXAMPLES")
    or Path(__file__).resolve().parents[3] / "shared" / "upstream-examples" / "hami"
)
INVENTORY = "--inventory {data}/inventory-two-sizes.yaml"
REFUSED = {"dynamic_mig_example.yaml": "asks for MIG hardware isolation"}
UNCHANGED = {"mig_example.yaml"}
WARNED = {"specify_scheduling_policy.yaml": "placement is the scheduler's job"}


def _examples() -> list[Path]:
    found = sorted(EXAMPLES.glob("*.yaml"))
    assert found, (
        f"no upstream examples under {EXAMPLES}: check out the reference dir beside the "
        "repository (../shared) or set VGPU_BRIDGE_UPSTREAM_EXAMPLES to HAMi's examples"
    )
    return found


@pytest.mark.parametrize("example", _examples(), ids=lambda p: p.name)
def test_upstream_example_translates_or_is_refused_with_a_reason(example: Path) -> None:
    result = run_cli(f"translate -f {example} {INVENTORY}")
    if example.name in REFUSED:
        assert result.code == 1
        assert REFUSED[example.name] in result.stderr
        assert result.stdout == ""
        return
    assert result.code == 0, result.stderr
    if example.name in UNCHANGED:
        assert "resourceClaims" not in result.stdout
        assert "nvidia.com/mig-3g.20gb" in result.stdout
    else:
        assert "ResourceClaimTemplate" in result.stdout
        assert "nvidia.com/gpu:" not in result.stdout
    if example.name in WARNED:
        assert WARNED[example.name] in result.stderr


def test_persistent_volume_claim_beside_a_deployment_passes_through() -> None:
    result = run_cli(f"translate -f {EXAMPLES / 'vllm_cross_vgpu.yaml'} {INVENTORY}")
    assert result.code == 0, result.stderr
    assert "kind: PersistentVolumeClaim\nmetadata:\n  name: vllm-cross-vgpu-cache" in result.stdout
    assert result.stdout.count("firstAvailable") == 1
