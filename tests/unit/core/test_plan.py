"""A plan says which pod templates and containers it gave claims, matching what its patch does."""

from __future__ import annotations

from typing import Any

from vgpu_bridge.core import TranslationContext, translate
from vgpu_bridge.core.plan import TranslatedContainer

GPU = {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}}


def container(name: str, resources: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "image": "cuda", "resources": resources or {}}


def test_a_deployment_plan_names_its_template_and_each_translated_container() -> None:
    spec = {
        "initContainers": [container("warm", GPU)],
        "containers": [container("cpu"), container("main", GPU)],
    }
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {"template": {"spec": spec}},
    }
    plan = translate(obj, context=TranslationContext())
    (pod,) = plan.translated
    assert pod.template.spec_path == "spec.template.spec"
    (template,) = plan.templates
    name = template["metadata"]["name"]
    assert pod.containers == (  # the init container shares the app's claim (never beside it)
        TranslatedContainer("spec.template.spec.initContainers[0]", "gpu-main", name),
        TranslatedContainer("spec.template.spec.containers[1]", "gpu-main", name),
    )
    patched = plan.apply_to(obj)["spec"]["template"]["spec"]
    assert patched["resourceClaims"] == [{"name": "gpu-main", "resourceClaimTemplateName": name}]


def test_a_volcano_job_plan_names_only_the_tasks_it_translated() -> None:
    tasks = [
        {"name": "cpu", "template": {"spec": {"containers": [container("c")]}}},
        {"name": "gpu", "template": {"spec": {"containers": [container("g", GPU)]}}},
    ]
    obj = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"tasks": tasks},
    }
    plan = translate(obj, context=TranslationContext())
    assert [p.template.spec_path for p in plan.translated] == ["spec.tasks[1].template.spec"]


def test_an_object_asking_for_no_gpu_has_nothing_translated() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [container("c")]},
    }
    assert translate(obj, context=TranslationContext()).translated == ()
