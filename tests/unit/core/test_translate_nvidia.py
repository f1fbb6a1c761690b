"""HAMi requests translated for NVIDIA's DRA driver (`--profile nvidia`), in each of its
`--consumable-shares` modes: memory into `memory`, gpucores into `shares` of N where the driver
counts shares, and every claim asks for our enforcer beside the card, with the SM limit and the
priority in the enforcer's config."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.core.test_translate_reapplied import reapplied
from vgpu_bridge.core import (
    ENFORCER_DRIVER,
    ENFORCER_REQUEST,
    InvalidRequest,
    Inventory,
    TranslationContext,
    TranslatorConfig,
    nvidia_profile,
    translate,
)
from vgpu_bridge.core.opaque_config import API_VERSION, KIND
from vgpu_bridge.core.plan import Plan

GiB = 1024**3
CARD = "80Gi"  # NVIDIA publishes the mock H100's memory as 80Gi
ONE_SIZE = Inventory({"gpu.nvidia.com": frozenset({80 * GiB})})
TWO_SIZES = Inventory({"gpu.nvidia.com": frozenset({40 * GiB, 80 * GiB})})
SIZE_SELECTOR = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) == 0'
ENFORCER = {
    "name": ENFORCER_REQUEST,
    "exactly": {"deviceClassName": ENFORCER_DRIVER, "allocationMode": "ExactCount", "count": 1},
}


def pod(limits: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "team-a"}
    if annotations:
        meta["annotations"] = annotations
    container = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container]},
    }


def plan_for(
    obj: dict[str, Any], mode: str, inventory: Inventory = ONE_SIZE, **config: Any
) -> Plan:
    context = TranslationContext(
        config=TranslatorConfig(**config), profile=nvidia_profile(mode), inventory=inventory
    )
    return translate(obj, context=context)


def spec_of(plan: Plan) -> dict[str, Any]:
    (template,) = plan.templates
    spec: dict[str, Any] = template["spec"]["spec"]
    return spec


def card_request(spec: dict[str, Any]) -> dict[str, Any]:
    gpu, enforcer = spec["devices"]["requests"]
    assert gpu["name"] == "gpu"
    assert enforcer == ENFORCER
    body: dict[str, Any] = gpu["exactly"]
    assert body["deviceClassName"] == "gpu.nvidia.com"
    return body


def enforcer_parameters(spec: dict[str, Any]) -> dict[str, Any]:
    (config,) = spec["devices"]["config"]
    assert config["requests"] == [ENFORCER_REQUEST]
    assert config["opaque"]["driver"] == ENFORCER_DRIVER
    parameters: dict[str, Any] = config["opaque"]["parameters"]
    return parameters


GPUMEM = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}
# mode, what the container asks, capacity requests of the card, cores in the enforcer's config
CASES = [
    ("100", GPUMEM, {"memory": "3000Mi"}, 0),
    ("100", {**GPUMEM, "nvidia.com/gpucores": 0}, {"memory": "3000Mi"}, 0),
    ("100", {**GPUMEM, "nvidia.com/gpucores": 30}, {"memory": "3000Mi", "shares": "30"}, 30),
    ("100", {**GPUMEM, "nvidia.com/gpucores": 100}, {"memory": "3000Mi", "shares": "100"}, 100),
    ("4", {**GPUMEM, "nvidia.com/gpucores": 30}, {"memory": "3000Mi", "shares": "2"}, 30),
    ("4", {**GPUMEM, "nvidia.com/gpucores": 1}, {"memory": "3000Mi", "shares": "1"}, 1),
    ("4", {**GPUMEM, "nvidia.com/gpucores": 100}, {"memory": "3000Mi", "shares": "4"}, 100),
    ("4", GPUMEM, {"memory": "3000Mi"}, 0),
    ("memory", {**GPUMEM, "nvidia.com/gpucores": 30}, {"memory": "3000Mi"}, 30),
    ("unlimited", {**GPUMEM, "nvidia.com/gpucores": 30}, {"memory": "3000Mi"}, 30),
    ("memory", GPUMEM, {"memory": "3000Mi"}, 0),
    # a whole card: the policy default where it is the whole card (memory mode), else 100%
    ("memory", {"nvidia.com/gpu": 1}, {}, 100),
    ("unlimited", {"nvidia.com/gpu": 1}, {"memory": CARD}, 100),
    ("100", {"nvidia.com/gpu": 1}, {"memory": CARD, "shares": "100"}, 100),
    ("4", {"nvidia.com/gpu": 1}, {"memory": CARD, "shares": "4"}, 100),
    # a percentage of the card: per card size, one size here
    ("100", {"nvidia.com/gpumem-percentage": 50}, {"memory": "40Gi"}, 0),
    ("memory", {"nvidia.com/gpumem-percentage": 50}, {"memory": "40Gi"}, 0),
    ("100", {"nvidia.com/gpumem-percentage": 100}, {"memory": CARD, "shares": "100"}, 100),
    ("memory", {"nvidia.com/gpumem-percentage": 100}, {}, 100),
]


def _case_id(mode: str, limits: dict[str, Any]) -> str:
    asked = "-".join(f"{key.split('/')[1]}={value}" for key, value in limits.items())
    return f"{mode}-{asked}"


@pytest.mark.parametrize(
    ("mode", "limits", "capacity", "cores"),
    CASES,
    ids=[_case_id(c[0], c[1]) for c in CASES],
)
def test_each_mode_books_memory_and_shares_and_hands_the_sm_limit_to_the_enforcer(
    mode: str, limits: dict[str, Any], capacity: dict[str, str], cores: int
) -> None:
    spec = spec_of(plan_for(pod(limits), mode))
    body = card_request(spec)
    assert body["allocationMode"] == "ExactCount"
    assert body["count"] == 1
    assert body.get("capacity", {}).get("requests", {}) == capacity
    assert enforcer_parameters(spec) == {"apiVersion": API_VERSION, "kind": KIND, "cores": cores}
    assert "constraints" not in spec["devices"]


@pytest.mark.parametrize("mode", ["unlimited", "100"])
def test_a_whole_card_where_the_default_is_no_memory_books_all_of_it_on_each_size(
    mode: str,
) -> None:
    spec = spec_of(plan_for(pod({"nvidia.com/gpu": 1}), mode))
    body = card_request(spec)
    assert body["selectors"] == [{"cel": {"expression": SIZE_SELECTOR}}]


def test_a_whole_card_on_two_card_sizes_offers_one_alternative_per_size() -> None:
    spec = spec_of(plan_for(pod({"nvidia.com/gpu": 1}), "100", TWO_SIZES))
    gpu, enforcer = spec["devices"]["requests"]
    assert enforcer == ENFORCER
    sizes = [a["capacity"]["requests"]["memory"] for a in gpu["firstAvailable"]]
    assert sizes == ["40Gi", "80Gi"]
    assert {a["capacity"]["requests"]["shares"] for a in gpu["firstAvailable"]} == {"100"}


def test_a_whole_card_without_the_card_sizes_is_refused_where_the_default_is_no_memory() -> None:
    with pytest.raises(InvalidRequest, match="a whole card needs the cluster's card sizes"):
        plan_for(pod({"nvidia.com/gpu": 1}), "unlimited", Inventory())


def test_a_whole_card_in_memory_mode_needs_no_card_sizes() -> None:
    spec = spec_of(plan_for(pod({"nvidia.com/gpu": 1}), "memory", Inventory()))
    assert "capacity" not in card_request(spec)


def test_two_cards_are_distinct_cards_and_one_enforcer() -> None:
    limits = {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}
    spec = spec_of(plan_for(pod(limits), "100"))
    assert card_request(spec)["count"] == 2
    assert spec["devices"]["constraints"] == [
        {"requests": ["gpu"], "distinctAttribute": "gpu.nvidia.com/uuid"}
    ]


@pytest.mark.parametrize("mode", ["100", "memory"])
def test_the_priority_goes_to_the_enforcer_not_dropped(mode: str) -> None:
    plan = plan_for(pod({**GPUMEM, "nvidia.com/priority": 1}), mode)
    assert enforcer_parameters(spec_of(plan))["priority"] == 1
    assert not [w for w in plan.warnings if "priority" in w]


@pytest.mark.parametrize("mode", ["memory", "unlimited"])
def test_cores_where_the_driver_books_none_are_a_limit_with_a_warning(mode: str) -> None:
    plan = plan_for(pod({**GPUMEM, "nvidia.com/gpucores": 100}), mode)
    (warning,) = plan.warnings
    assert "nvidia.com/gpucores" in warning
    assert f"--consumable-shares={mode}" in warning
    assert "not booked" in warning
    assert "does not keep the card" in warning


@pytest.mark.parametrize("mode", ["memory", "unlimited"])
@pytest.mark.parametrize(
    "whole", [{}, {"nvidia.com/gpumem-percentage": 100}], ids=["no-memory", "percentage-100"]
)
def test_cores_on_a_card_whose_memory_is_booked_whole_do_not_say_it_is_shared(
    mode: str, whole: dict[str, Any]
) -> None:
    """The card's whole memory is booked, so no other share fits on it: it is kept."""
    plan = plan_for(pod({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100, **whole}), mode)
    (warning,) = plan.warnings
    assert "not booked" in warning
    assert "does not keep the card" not in warning
    assert "shares of any SM limit are placed beside it" not in warning
    assert "whole memory" in warning


@pytest.mark.parametrize("mode", ["memory", "unlimited", "100"])
def test_no_cores_asked_no_warning(mode: str) -> None:
    assert plan_for(pod(GPUMEM), mode).warnings == ()


def test_a_card_type_choice_selects_on_nvidia_attributes() -> None:
    plan = plan_for(pod(GPUMEM, {"nvidia.com/use-gputype": "H100"}), "100")
    (selector,) = card_request(spec_of(plan))["selectors"]
    expression = selector["cel"]["expression"]
    assert expression.startswith('device.attributes["gpu.nvidia.com"].productName')


def test_the_mutex_policy_books_a_whole_card_and_all_its_shares() -> None:
    obj = pod(GPUMEM, {"hami.io/gpu-scheduler-policy": "mutex"})
    spec = spec_of(plan_for(obj, "4"))
    assert card_request(spec)["capacity"]["requests"] == {"memory": CARD, "shares": "4"}


def test_a_reapplied_translated_pod_translates_back_to_itself() -> None:
    manifest = pod({**GPUMEM, "nvidia.com/gpucores": 30, "nvidia.com/priority": 0})
    live = plan_for(manifest, "100").apply_to(manifest)
    merged = reapplied(manifest, live)
    assert plan_for(merged, "100").apply_to(merged) == live
    assert plan_for(live, "100").patch == ()  # translated output needs nothing more
