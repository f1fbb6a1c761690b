"""What every adapter in the registry must do, whatever its scheduler's quirks."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.adapters import SchedulerAdapter, default_registry
from vgpu_bridge.core import InvalidRequest, TranslationContext

REGISTRY = default_registry()
ADAPTERS = [REGISTRY.get(name) for name in REGISTRY.names()]
CONTEXT = TranslationContext()


def gpu_pod(limits: dict[str, Any]) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n"},
        "spec": {"containers": [container]},
    }


@pytest.fixture(params=ADAPTERS, ids=[a.name for a in ADAPTERS])
def adapter(request: pytest.FixtureRequest) -> SchedulerAdapter:
    chosen: SchedulerAdapter = request.param
    return chosen


def test_adapter_leaves_a_pod_without_gpu_request_alone(adapter: SchedulerAdapter) -> None:
    plan = adapter.translate(gpu_pod({"cpu": "1"}), context=CONTEXT)
    assert (plan.patch, plan.templates, plan.warnings) == ((), (), ())


def test_adapter_translates_deterministically_and_idempotently(adapter: SchedulerAdapter) -> None:
    pod = gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})
    plan = adapter.translate(pod, context=CONTEXT)
    assert plan.changes_object
    assert plan == adapter.translate(pod, context=CONTEXT)
    assert not adapter.translate(plan.apply_to(pod), context=CONTEXT).changes_object
    assert plan.adapter == adapter.name


def test_adapter_refuses_bad_input_with_field_paths(adapter: SchedulerAdapter) -> None:
    with pytest.raises(InvalidRequest) as refused:
        adapter.translate(gpu_pod({"nvidia.com/gpucores": 101}), context=CONTEXT)
    assert refused.value.lines() == [
        "Pod/n/p: spec.containers[0].resources.limits[nvidia.com/gpucores]: "
        "must be a whole number (percent of SMs), between 0 and 100, got 101"
    ]


def test_adapter_names_are_unique_and_known_to_the_registry() -> None:
    names = [a.name for a in ADAPTERS]
    assert len(set(names)) == len(names)
    assert {"default", "volcano", "kai"} <= set(names)
