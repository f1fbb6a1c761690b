"""Per-object bounds (issue 25): a pod with more containers, claims or env entries than any real
pod has is refused naming the list, before anything walks it; at the bound it is read as ever."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.core.errors import InvalidRequest
from vgpu_bridge.core.shapes import (
    MAX_CONTAINER_CLAIMS,
    MAX_CONTAINERS,
    MAX_ENV,
    MAX_POD_CLAIMS,
    check_shape,
)


def containers(count: int, **fields: Any) -> list[dict[str, Any]]:
    return [{"name": f"c{i}", "image": "x", **fields} for i in range(count)]


def pod(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": containers(1), **spec}}  # fmt: skip


def deployment(**spec: Any) -> dict[str, Any]:
    template = {"metadata": {}, "spec": {"containers": containers(1), **spec}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"template": template}}  # fmt: skip


def volcano_job(**spec: Any) -> dict[str, Any]:
    task = {"name": "t", "template": {"spec": {"containers": containers(1), **spec}}}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v"},
            "spec": {"tasks": [task]}}  # fmt: skip


def refusal(obj: dict[str, Any]) -> str:
    with pytest.raises(InvalidRequest) as caught:
        check_shape(obj)
    return str(caught.value)


TOO_MUCH = {
    "containers": (
        pod(containers=containers(MAX_CONTAINERS + 1)),
        f"spec.containers: a pod may have at most {MAX_CONTAINERS} containers",
    ),
    "containers and initContainers together": (
        pod(containers=containers(200), initContainers=containers(MAX_CONTAINERS - 199)),
        "spec.containers: a pod may have at most 256 containers and initContainers together, "
        "got 257 or more",
    ),
    "a Deployment's containers": (
        deployment(containers=containers(5000)),
        "spec.template.spec.containers: a pod may have at most",
    ),
    "a Volcano task's containers": (
        volcano_job(containers=containers(MAX_CONTAINERS + 1)),
        "spec.tasks[0].template.spec.containers: a pod may have at most",
    ),
    "pod claims": (
        pod(resourceClaims=[{"name": f"c{i}"} for i in range(MAX_POD_CLAIMS + 1)]),
        f"spec.resourceClaims: at most {MAX_POD_CLAIMS} claims per pod, got 129",
    ),
    "env entries": (
        pod(containers=containers(1, env=[{"name": "A", "value": "1"}] * (MAX_ENV + 1))),
        f"spec.containers[0].env: at most {MAX_ENV} env entries per container, got 1025",
    ),
    "container claims": (
        pod(
            containers=containers(
                1, resources={"claims": [{"name": "c"}] * (MAX_CONTAINER_CLAIMS + 1)}
            )
        ),
        f"spec.containers[0].resources.claims: at most {MAX_CONTAINER_CLAIMS} claims",
    ),
}


@pytest.mark.parametrize(("obj", "named"), TOO_MUCH.values(), ids=TOO_MUCH.keys())
def test_past_a_bound_the_object_is_refused_naming_the_list(
    obj: dict[str, Any], named: str
) -> None:
    assert named in refusal(obj)


def test_at_every_bound_the_object_is_read_as_ever() -> None:
    claims = [{"name": f"c{i}"} for i in range(MAX_POD_CLAIMS)]
    full = containers(
        MAX_CONTAINERS - 1,
        env=[{"name": "A", "value": "1"}] * MAX_ENV,
        resources={"claims": [{"name": "c0"}] * MAX_CONTAINER_CLAIMS},
    )
    check_shape(pod(containers=full, resourceClaims=claims))  # 256 with the init one below
    check_shape(pod(containers=full, initContainers=containers(1), resourceClaims=claims))


def test_a_huge_container_list_is_refused_without_reading_its_items() -> None:
    """Wrong-typed items past the bound are not listed one by one: one line names the list."""
    message = refusal(pod(containers=[5] * 10_000))
    assert message.count("spec.containers") == 1
