"""Quantities and counts beyond what Kubernetes can hold are refused before any big-number work."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from vgpu_bridge.core import (
    DEFAULT,
    InvalidRequest,
    Inventory,
    TranslationContext,
    TranslatorConfig,
)
from vgpu_bridge.core import translate as translate_object
from vgpu_bridge.core.quantity import MAX_QUANTITY, QuantityError, parse_quantity

CONTEXT = TranslationContext(config=TranslatorConfig(), profile=DEFAULT, inventory=Inventory())
HUGE = ["1e999999", "1e9999999999", "9" * 5000, "1" + "0" * 19, "9Ei", "10E", "-1e19", "0" * 65]


@pytest.mark.parametrize("text", HUGE)
def test_parse_quantity_refuses_magnitudes_kubernetes_cannot_hold(text: str) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (str(2**63 - 1), Decimal(2**63 - 1)),
        ("7Ei", Decimal(7 * 2**60)),
        ("9223372036854775807000m", Decimal(2**63 - 1)),
        ("-9223372036854775807", Decimal(-(2**63) + 1)),
        ("1n", Decimal("1e-9")),
        ("0e999999", Decimal(0)),
        ("1e-99999999999", Decimal("1e-9")),
        ("1.5n", Decimal("2e-9")),
        ("-0.0000000001", Decimal("-1e-9")),
    ],
)
def test_parse_quantity_keeps_everything_up_to_the_kubernetes_limit(
    text: str, value: Decimal
) -> None:
    assert parse_quantity(text) == value
    assert MAX_QUANTITY == 2**63 - 1


def pod(limits: dict[str, Any], annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    container = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    meta: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container]},
    }


def refusal(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidRequest) as caught:
        translate_object(obj, context=CONTEXT)
    return caught.value.lines()


LIMIT = "spec.containers[0].resources.limits"


@pytest.mark.parametrize("value", ["1e999999", "1e9", "4Gi", "33", 33, "1e99999999999"])
@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "volcano.sh/vgpu-number"])
def test_a_gpu_count_beyond_32_devices_is_refused_with_its_field(
    resource: str, value: object
) -> None:
    (line,) = refusal(pod({resource: value}))
    assert f"{LIMIT}[{resource}]: must be a whole number" in line
    assert "between 0 and 32" in line


@pytest.mark.parametrize("value", ["1e999999", "1e13", "9Ei"])
def test_gpumem_beyond_what_a_claim_can_hold_is_refused(value: str) -> None:
    (line,) = refusal(pod({"nvidia.com/gpumem": value}))
    assert f"{LIMIT}[nvidia.com/gpumem]: " in line
    assert "must be a whole number of MiB" in line or "gpumem is MiB" in line


def test_kai_gpu_memory_of_a_million_digits_is_refused_with_its_annotation() -> None:
    (line,) = refusal(pod({"cpu": "1"}, {"gpu-memory": "1e999999"}))
    assert "metadata.annotations[gpu-memory]: must be a whole number of MiB" in line


@pytest.mark.parametrize("value", ["1e9", "4Gi", "33", "1e999999"])
def test_kai_num_devices_beyond_32_is_refused_with_its_annotation(value: str) -> None:
    annotations = {"gpu-memory": "1000", "gpu-fraction-num-devices": value}
    (line,) = refusal(pod({"cpu": "1"}, annotations))
    assert "metadata.annotations[gpu-fraction-num-devices]: must be a whole number" in line
    assert "between 1 and 32" in line


def test_32_gpus_are_still_a_valid_request() -> None:
    plan = translate_object(pod({"nvidia.com/gpu": 32}), context=CONTEXT)
    (template,) = plan.templates
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 32


def test_memory_factor_cannot_push_gpumem_past_the_quantity_limit() -> None:
    config = TranslatorConfig(memory_factor=2**20)
    context = TranslationContext(config=config, profile=DEFAULT, inventory=Inventory())
    with pytest.raises(InvalidRequest) as caught:
        translate_object(pod({"nvidia.com/gpumem": 2**30}), context=context)
    (line,) = caught.value.lines()
    assert f"{LIMIT}[nvidia.com/gpumem]" in line
    assert "memory factor" in line
