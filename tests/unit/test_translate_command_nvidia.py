"""`vgpu-bridge translate --profile nvidia [--nvidia-consumable-shares MODE]`: manifests for
NVIDIA's DRA driver, card sizes from its slices or --card-memory; a mode NVIDIA's driver does
not share in, or the flag without the profile, is a usage error (exit 2)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cli_runner import run_cli

POD = """
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: team-a}
spec:
  containers:
  - name: main
    image: cuda
    resources:
      limits: {nvidia.com/gpu: 1, nvidia.com/gpumem-percentage: 50, nvidia.com/gpucores: 30}
"""


def templates(stdout: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(stdout)["items"]
    return [o for o in items if o["kind"] == "ResourceClaimTemplate"]


def card_request(stdout: str) -> dict[str, Any]:
    (template,) = templates(stdout)
    gpu, enforcer = template["spec"]["spec"]["devices"]["requests"]
    assert enforcer["exactly"]["deviceClassName"] == "enforcer.vgb.io"
    body: dict[str, Any] = gpu["exactly"]
    return body


@pytest.mark.parametrize(
    ("mode", "capacity"),
    [
        (None, {"memory": "40Gi", "shares": "30"}),
        ("4", {"memory": "40Gi", "shares": "2"}),
        ("memory", {"memory": "40Gi"}),
        ("unlimited", {"memory": "40Gi"}),
    ],
)
def test_card_sizes_come_from_nvidia_slices_and_shares_from_the_mode(
    mode: str | None, capacity: dict[str, str]
) -> None:
    flag = f"--nvidia-consumable-shares {mode}" if mode else ""
    args = (
        f"translate -f - -o json --profile nvidia {flag} --inventory {{data}}/inventory-nvidia.yaml"
    )
    result = run_cli(args, stdin=POD)
    assert result.code == 0, result.stderr
    assert card_request(result.stdout)["capacity"]["requests"] == capacity


def test_card_memory_sizes_nvidia_cards() -> None:
    result = run_cli("translate -f - -o json --profile nvidia --card-memory 80Gi", stdin=POD)
    assert result.code == 0, result.stderr
    assert card_request(result.stdout)["capacity"]["requests"]["memory"] == "40Gi"


def test_the_unbooked_cores_warning_reaches_stderr() -> None:
    args = "translate -f - --profile nvidia --nvidia-consumable-shares memory --card-memory 80Gi"
    result = run_cli(args, stdin=POD)
    assert result.code == 0, result.stderr
    assert "warning: Pod/team-a/p: " in result.stderr
    assert "--consumable-shares=memory counts no SMs" in result.stderr


@pytest.mark.parametrize("mode", ["disabled", "0", "-1", "half", "1e3"])
def test_a_mode_nvidia_does_not_share_in_is_a_usage_error(mode: str) -> None:
    result = run_cli(f"translate -f - --profile nvidia --nvidia-consumable-shares {mode}")
    assert result.code == 2
    assert "--nvidia-consumable-shares" in result.stderr
    assert repr(mode) in result.stderr
    assert result.stdout == ""


def test_the_mode_without_the_nvidia_profile_is_a_usage_error() -> None:
    result = run_cli("translate -f - --nvidia-consumable-shares 4", stdin=POD)
    assert result.code == 2
    assert "--nvidia-consumable-shares applies to --profile nvidia only" in result.stderr


def test_an_enforcer_name_kai_would_count_is_a_usage_error() -> None:
    result = run_cli("translate -f - --profile nvidia --enforcer-driver vgpu-limits.example.com")
    assert result.code == 2
    assert "--enforcer-driver" in result.stderr


def test_a_renamed_enforcer_is_asked_for_by_its_name() -> None:
    args = "translate -f - -o json --profile nvidia --enforcer-driver limits.example.com"
    result = run_cli(args + " --card-memory 80Gi", stdin=POD)
    assert result.code == 0, result.stderr
    (template,) = templates(result.stdout)
    devices = template["spec"]["spec"]["devices"]
    assert devices["requests"][1]["exactly"]["deviceClassName"] == "limits.example.com"
    assert devices["config"][0]["opaque"]["driver"] == "limits.example.com"
