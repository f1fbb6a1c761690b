"""The adapters on NVIDIA's DRA driver (profile `nvidia`): every adapter keeps its contract,
Volcano's jobs and PodGroups come out right with claims of two requests (the card and our
enforcer), and KAI gets no alternatives and counts each share as one GPU, the enforcer as none.

KAI's DRA accounting (kai.md §1.5) counts an `exactly` request as `count` GPUs when its
DeviceClass name contains "gpu", and a slice device as node GPU capacity when its driver name
does: `gpu.nvidia.com` does, so each NVIDIA share counts as a whole GPU in queue quota and fit
(over-counting, as with ours); `enforcer.vgb.io` does not, so neither the enforcer request nor
the enforcer device of each node is counted.
"""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.adapters import SchedulerAdapter, default_registry
from vgpu_bridge.adapters.kai import KaiAdapter
from vgpu_bridge.adapters.volcano import VolcanoAdapter
from vgpu_bridge.core import (
    ENFORCER_DRIVER,
    ENFORCER_REQUEST,
    InvalidRequest,
    Inventory,
    TranslationContext,
    nvidia_profile,
)
from vgpu_bridge.core.dialects import TRANSLATED_RESOURCES

GiB = 2**30
ONE_SIZE = Inventory({"gpu.nvidia.com": frozenset({80 * GiB})})
TWO_SIZES = Inventory({"gpu.nvidia.com": frozenset({40 * GiB, 80 * GiB})})
NVIDIA = TranslationContext(profile=nvidia_profile("100"), inventory=ONE_SIZE)
REGISTRY = default_registry()
ADAPTERS = [REGISTRY.get(name) for name in REGISTRY.names()]


def kai_gpus(spec: dict[str, Any]) -> int:
    """KAI's count of GPUs in a claim spec (kai.md §1.5): `exactly` requests of a class whose
    name contains "gpu" add their count; `firstAvailable` and other classes add none."""
    total = 0
    for request in spec["devices"]["requests"]:
        exactly = request.get("exactly")
        if exactly and "gpu" in exactly["deviceClassName"].lower():
            total += max(1, int(exactly.get("count") or 0))
    return total


def gpu_pod(limits: dict[str, Any], **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
            "spec": {"containers": [container], **spec}}  # fmt: skip


def requests_of(template: dict[str, Any]) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = template["spec"]["spec"]["devices"]["requests"]
    return requests


@pytest.mark.parametrize("adapter", ADAPTERS, ids=[a.name for a in ADAPTERS])
def test_every_adapter_translates_for_nvidia_deterministically_and_idempotently(
    adapter: SchedulerAdapter,
) -> None:
    pod = gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 20})
    plan = adapter.translate(pod, context=NVIDIA)
    assert plan == adapter.translate(pod, context=NVIDIA)
    assert not adapter.translate(plan.apply_to(pod), context=NVIDIA).changes_object
    (template,) = plan.templates
    gpu, enforcer = requests_of(template)
    assert gpu["exactly"]["capacity"]["requests"] == {"memory": "1000Mi", "shares": "20"}
    assert enforcer["exactly"]["deviceClassName"] == ENFORCER_DRIVER


def vcjob() -> dict[str, Any]:
    limits = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 4096,
              "volcano.sh/vgpu-cores": 50}  # fmt: skip
    resources = {"limits": dict(limits), "requests": {**limits, "cpu": "2"}}
    task = {"name": "worker", "replicas": 2,
            "template": {"spec": {"containers": [{"name": "w", "image": "x",
                                                  "resources": resources}]}}}  # fmt: skip
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ns"},
            "spec": {"minAvailable": 2, "tasks": [task]}}  # fmt: skip


def test_a_vcjob_gets_job_scoped_templates_with_the_share_and_the_enforcer() -> None:
    plan = VolcanoAdapter().translate(vcjob(), context=NVIDIA)
    (template,) = plan.templates
    assert template["metadata"]["name"].startswith("vgpu-train-")
    gpu, enforcer = requests_of(template)
    assert gpu["exactly"]["capacity"]["requests"] == {"memory": "4Gi", "shares": "50"}
    assert enforcer["name"] == ENFORCER_REQUEST
    container = plan.apply_to(vcjob())["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    # what vc-controller sums into the PodGroup's minResources: cpu, no GPU key of any name
    assert container["resources"]["requests"] == {"cpu": "2"}
    assert not set(container["resources"]) - {"requests", "claims"}


def test_a_podgroup_loses_gpu_keys_whatever_the_profile() -> None:
    group = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
             "metadata": {"name": "g", "namespace": "ns"},
             "spec": {"minResources": {"cpu": "4", "volcano.sh/vgpu-number": "2",
                                       "nvidia.com/gpu": "2"}}}  # fmt: skip
    translated = VolcanoAdapter().translate(group, context=NVIDIA).apply_to(group)
    assert translated["spec"]["minResources"] == {"cpu": "4"}
    assert "nvidia.com/gpu" in TRANSLATED_RESOURCES


def kai_pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "annotations": annotations,
                         "labels": {"kai.scheduler/queue": "q"}},
            "spec": {"schedulerName": "kai-scheduler",
                     "containers": [{"name": "c", "image": "x"}]}}  # fmt: skip


@pytest.mark.parametrize(
    ("annotations", "memory"),
    [({"gpu-fraction": "0.5"}, "40Gi"), ({"gpu-memory": "2048"}, "2Gi")],
)
def test_kai_shares_are_exact_requests_counted_as_one_gpu_and_the_enforcer_as_none(
    annotations: dict[str, str], memory: str
) -> None:
    plan = KaiAdapter().translate(kai_pod(annotations), context=NVIDIA)
    (template,) = plan.templates
    spec = template["spec"]["spec"]
    gpu, enforcer = requests_of(template)
    assert "firstAvailable" not in gpu
    assert gpu["exactly"]["capacity"]["requests"] == {"memory": memory}
    assert kai_gpus(spec) == 1
    assert kai_gpus({"devices": {"requests": [enforcer]}}) == 0


@pytest.mark.parametrize(
    ("annotations", "limits"),
    [({"gpu-fraction": "0.5"}, None), ({}, {"nvidia.com/gpu": 1})],
    ids=["fraction", "whole-card"],
)
def test_kai_on_two_card_sizes_refuses_what_needs_a_card_size(
    annotations: dict[str, str], limits: dict[str, Any] | None
) -> None:
    pod = kai_pod(annotations)
    if limits:
        pod["spec"]["containers"][0]["resources"] = {"limits": limits}
    context = TranslationContext(profile=nvidia_profile("100"), inventory=TWO_SIZES)
    with pytest.raises(InvalidRequest, match="cannot choose among alternatives"):
        KaiAdapter().translate(pod, context=context)


def test_kai_whole_card_in_memory_mode_needs_no_card_size() -> None:
    pod = kai_pod({})
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 2}}
    context = TranslationContext(profile=nvidia_profile("memory"), inventory=TWO_SIZES)
    (template,) = KaiAdapter().translate(pod, context=context).templates
    assert kai_gpus(template["spec"]["spec"]) == 2
