"""core.guardrails: a container naming two claims of our class (issue #25 item 3), pure."""

from __future__ import annotations

from typing import Any

from vgpu_bridge.core.guardrails import check_claims_per_container, several_claims
from vgpu_bridge.core.models import Problems
from vgpu_bridge.core.workloads import pod_templates


def template(*containers: list[Any]) -> Any:
    bodies = [
        {"name": f"c{i}", "resources": {"claims": [{"name": n} for n in named]}}
        for i, named in enumerate(containers)
    ]
    (found,) = pod_templates({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": bodies}})
    return found


def problems_of(found: Any, ours: dict[str, str]) -> list[str]:
    problems = Problems()
    check_claims_per_container(found, ours=ours, device_class="gpu.example", problems=problems)
    return [f"{e.path}: {e.reason}" for e in problems.errors]


def test_only_containers_naming_two_or_more_claims_need_their_class_known() -> None:
    assert several_claims(template(["a"], ["b", "c"], ["b", "b"])) == {"b", "c"}
    assert several_claims(template(["a"], ["b"])) == set()


def test_two_claims_of_ours_in_one_container_are_a_problem_naming_both() -> None:
    found = template(["x"], ["a", "b"])
    (problem,) = problems_of(found, {"a": "ResourceClaim big", "b": "ResourceClaim small"})
    assert problem.startswith(
        "spec.containers[1].resources.claims: container 'c1' names 2 claims of class "
        "gpu.example (ResourceClaim big, ResourceClaim small)"
    )


def test_one_of_ours_and_one_other_or_one_claim_named_twice_are_fine() -> None:
    assert problems_of(template(["a", "b"]), {"a": "ResourceClaim big"}) == []
    same = {"a": "ResourceClaim big", "b": "ResourceClaim big"}
    assert problems_of(template(["a", "b"]), same) == []


def test_a_malformed_claims_list_is_no_problem_here() -> None:
    """check_shape refuses wrong types before; this check just finds no names in them."""
    (found,) = pod_templates(
        {"apiVersion": "v1", "kind": "Pod",
         "spec": {"containers": [{"name": "c", "resources": {"claims": ["a", {"name": 3}]}}]}}
    )  # fmt: skip
    assert several_claims(found) == set()
    assert problems_of(found, {"a": "ResourceClaim a"}) == []
