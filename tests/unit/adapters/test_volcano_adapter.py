"""Volcano's quirks: recognition, job-scoped templates, enqueueable gangs, the version gate."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from vgpu_bridge.adapters import default_registry
from vgpu_bridge.adapters.volcano import VolcanoAdapter
from vgpu_bridge.core import Inventory, TranslationContext
from vgpu_bridge.core.dialects import TRANSLATED_RESOURCES
from vgpu_bridge.core.quantity import parse_quantity

CONTEXT = TranslationContext()
ADAPTER = VolcanoAdapter()


def vcjob(name: str = "train", *, requests: bool = True) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4096}
    resources: dict[str, Any] = {"limits": dict(gpu)}
    if requests:
        resources["requests"] = {**gpu, "cpu": "2"}
    task = {
        "name": "worker",
        "replicas": 2,
        "template": {"spec": {"containers": [{"name": "w", "image": "x", "resources": resources}]}},
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"minAvailable": 2, "tasks": [task]},
    }


def pod(**spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [container], **spec},
    }


def min_resources(job: dict[str, Any]) -> Counter[str]:
    """What vc-controller's calcPGMinResources would compute: extended resources come from the
    task templates' `requests` only (volcano.md §3.2), times the pods counted (minAvailable)."""
    total: Counter[str] = Counter()
    for task in job["spec"]["tasks"]:
        for container in task["template"]["spec"]["containers"]:
            for key, value in container.get("resources", {}).get("requests", {}).items():
                total[key] += int(parse_quantity(value) * task["replicas"]) if key != "cpu" else 0
    return total


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(vcjob(), True, id="vcjob"),
        pytest.param(
            {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup"}, True, id="podgroup"
        ),
        pytest.param(pod(schedulerName="volcano"), True, id="pod-with-volcano-scheduler"),
        pytest.param(pod(), False, id="plain-pod"),
        pytest.param(pod(schedulerName="kai-scheduler"), False, id="kai-pod"),
        pytest.param({"apiVersion": "batch/v1", "kind": "Job", "spec": {}}, False, id="batch-job"),
    ],
)
def test_volcano_adapter_recognises_volcano_objects(obj: dict[str, Any], expected: bool) -> None:
    assert ADAPTER.recognises(obj) is expected


def test_gang_member_pod_is_recognised_by_its_group_annotation() -> None:
    member = pod()
    member["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "pg-1"}
    assert default_registry().pick(member).name == "volcano"


def test_vcjob_templates_are_named_after_the_job_so_two_jobs_never_share() -> None:
    first = ADAPTER.translate(vcjob("train"), context=CONTEXT)
    second = ADAPTER.translate(vcjob("eval"), context=CONTEXT)
    names = [t["metadata"]["name"] for t in first.templates]
    assert all(n.startswith("vgpu-train-") for n in names)
    assert not set(names) & {t["metadata"]["name"] for t in second.templates}


def test_reapplied_vcjob_is_rewritten_to_exactly_the_same_result() -> None:
    """Volcano refuses spec changes on UPDATE: the translation of a re-applied Job must match."""
    assert ADAPTER.translate(vcjob(), context=CONTEXT) == ADAPTER.translate(
        vcjob(), context=CONTEXT
    )


def test_translated_vcjob_gives_a_podgroup_without_gpu_keys_so_it_can_be_enqueued() -> None:
    job = vcjob(requests=True)
    assert TRANSLATED_RESOURCES & set(min_resources(job)), "the fixture must reproduce the deadlock"
    translated = ADAPTER.translate(job, context=CONTEXT).apply_to(job)
    assert not TRANSLATED_RESOURCES & set(min_resources(translated))


def test_podgroup_keeps_cpu_and_memory_and_loses_every_translated_key() -> None:
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg"},
        "spec": {
            "minResources": {
                "cpu": "1",
                "nvidia.com/gpu": "2",
                "limits.volcano.sh/vgpu-memory": "1",
            }
        },
    }
    plan = ADAPTER.translate(podgroup, context=CONTEXT)
    assert plan.apply_to(podgroup)["spec"]["minResources"] == {"cpu": "1"}
    assert plan.templates == ()
    assert "nvidia.com/gpu" in plan.warnings[0]


def test_podgroup_without_gpu_keys_is_untouched() -> None:
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "spec": {"minMember": 1},
    }
    assert not ADAPTER.translate(podgroup, context=CONTEXT).changes_object


@pytest.mark.parametrize(
    ("version", "warns"), [("v1.14.2", True), ("1.15.1", False), ("v1.16.0", False), (None, False)]
)
def test_volcano_before_1_15_is_warned_about(version: str | None, warns: bool) -> None:
    plan = VolcanoAdapter(version=version).translate(vcjob(), context=CONTEXT)
    assert any("ignores capacity requests" in w for w in plan.warnings) is warns


def test_percentage_in_a_vcjob_uses_first_available_like_any_pod() -> None:
    job = vcjob()
    limits = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits.pop("nvidia.com/gpumem")
    limits["nvidia.com/gpumem-percentage"] = 50
    job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"].pop("requests")
    sizes = frozenset({2**34, 2**35})
    context = TranslationContext(inventory=Inventory({"gpu.vgpu-bridge.io": sizes}))
    [template] = ADAPTER.translate(job, context=context).templates
    alternatives = template["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    shares = [parse_quantity(a["capacity"]["requests"]["memory"]) for a in alternatives]
    assert shares == [Decimal(2**33), Decimal(2**34)]


def test_task_with_only_gpu_requests_is_warned_about_best_effort_gang_breakage() -> None:
    job = vcjob(requests=False)
    plan = ADAPTER.translate(job, context=CONTEXT)
    assert any("best-effort" in w and "spec.tasks[0].template.spec" in w for w in plan.warnings)
    with_cpu = vcjob(requests=True)  # its requests carry cpu: 2
    assert not any(
        "best-effort" in w for w in ADAPTER.translate(with_cpu, context=CONTEXT).warnings
    )
