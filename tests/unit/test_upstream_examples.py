"""The manifests HAMi users run today (../shared/upstream-examples/hami) translate, or are refused
where DESIGN §3 says so."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from e2e.upstream_examples import hami_examples
from tests.cli_runner import run_cli

#: HAMi's own example manifests are not ours to commit (e2e/upstream_examples.py says where from)
EXAMPLES = hami_examples()
INVENTORY = "--inventory {data}/inventory-two-sizes.yaml"
REFUSED = {"dynamic_mig_example.yaml": "asks for MIG hardware isolation"}
UNCHANGED = {"mig_example.yaml"}
WARNED = {"specify_scheduling_policy.yaml": "placement is the scheduler's job"}


def _examples() -> list[Path]:
    found = sorted(EXAMPLES.glob("*.yaml"))
    assert found, (
        f"no upstream examples under {EXAMPLES}: check out the reference dir beside the "
        "repository (../shared) or beside the checkout it was cloned from, or set "
        "VGPU_BRIDGE_UPSTREAM_EXAMPLES to HAMi's examples"
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


#: NVIDIA's DRA driver (profile nvidia) in each of its sharing modes, on cards of two sizes
NVIDIA_MODES = ["100", "memory", "unlimited"]  # N=4 takes the path of 100
NVIDIA = "--profile nvidia --card-memory 40Gi --card-memory 80Gi"
NVIDIA_GOLDEN = Path(__file__).parent.parent / "data" / "nvidia-upstream"


@pytest.mark.parametrize("mode", NVIDIA_MODES)
@pytest.mark.parametrize("example", _examples(), ids=lambda p: p.name)
def test_upstream_example_runs_unchanged_on_nvidia_driver_with_the_enforcer(
    example: Path, mode: str
) -> None:
    result = run_cli(f"translate -f {example} {NVIDIA} --nvidia-consumable-shares {mode} -o json")
    if example.name in REFUSED:
        assert result.code == 1
        assert REFUSED[example.name] in result.stderr
        return
    assert result.code == 0, result.stderr
    templates = [
        o for o in json.loads(result.stdout)["items"] if o["kind"] == "ResourceClaimTemplate"
    ]
    assert bool(templates) is (example.name not in UNCHANGED)
    for template in templates:
        requests = template["spec"]["spec"]["devices"]["requests"]
        assert [r["name"] for r in requests] == ["gpu", "vgpu-limits"]
        assert requests[1]["exactly"]["deviceClassName"] == "enforcer.vgb.io"


def test_upstream_sharing_example_on_nvidia_driver_matches_its_golden_claims() -> None:
    """The claims HAMi's two-pods-share-a-card example gets on NVIDIA's driver with 100 shares
    (the golden holds only our output, the templates: the example itself is not ours)."""
    example = EXAMPLES / "use_sharing_card.yaml"
    result = run_cli(f"translate -f {example} {NVIDIA} -o json")
    assert result.code == 0, result.stderr
    items = json.loads(result.stdout)["items"]
    templates = [o for o in items if o["kind"] == "ResourceClaimTemplate"]
    golden = NVIDIA_GOLDEN / "use_sharing_card.templates.yaml"
    actual = yaml.safe_dump_all(templates, sort_keys=False)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(actual)
    assert actual == golden.read_text()
