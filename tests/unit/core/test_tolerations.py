"""Pods made from a translated workload tolerate what ExtendedResourceToleration would have given
them: they no longer request `nvidia.com/gpu`, so the admission plugin, which looks at the pods'
requests, gives them nothing, and a GPU pool tainted `nvidia.com/gpu:NoSchedule` stays closed to
them (issue 23). A Pod was seen by the plugin before the webhook, with its requests."""

from __future__ import annotations

from typing import Any

from vgpu_bridge.core import DEFAULT, Inventory, TranslationContext, TranslatorConfig, translate

CONTEXT = TranslationContext(config=TranslatorConfig(), profile=DEFAULT, inventory=Inventory())
LIMITS = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 4000, "cpu": "1"}


def spec(**extra: Any) -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": LIMITS}}],
            **extra}  # fmt: skip


def deployment(**extra: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": {"spec": spec(**extra)}}}  # fmt: skip


def tolerations(obj: dict[str, Any]) -> list[dict[str, str]]:
    translated = translate(obj, context=CONTEXT).apply_to(obj)
    pod_spec = (
        translated["spec"]["template"]["spec"]
        if "template" in translated["spec"]
        else translated["spec"]
    )
    return list(pod_spec.get("tolerations", []))


def toleration(key: str) -> dict[str, str]:
    return {"key": key, "operator": "Exists", "effect": "NoSchedule"}


def test_workload_pods_tolerate_each_gpu_resource_they_no_longer_request() -> None:
    assert tolerations(deployment()) == [
        toleration("nvidia.com/gpu"),
        toleration("nvidia.com/gpumem"),
    ]


def test_tolerations_the_template_has_are_kept_and_not_doubled() -> None:
    own = {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    listed = tolerations(deployment(tolerations=[own, toleration("nvidia.com/gpu")]))
    assert listed == [own, toleration("nvidia.com/gpu"), toleration("nvidia.com/gpumem")]


def test_a_pod_gets_none_from_us() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec()}
    assert tolerations(pod) == []
