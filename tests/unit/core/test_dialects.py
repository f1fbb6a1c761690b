"""Each request dialect owns its names alone, and translate() reads them only through it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from vgpu_bridge.core import InvalidRequest, TranslationContext, translate
from vgpu_bridge.core.dialects import (
    ANNOTATIONS,
    DIALECTS,
    TRANSLATED_RESOURCES,
    hami,
    kai,
    volcano,
)


def test_every_resource_and_annotation_belongs_to_one_dialect() -> None:
    owned = Counter(name for d in DIALECTS for name in (*d.resources, *d.annotations.all()))
    assert [name for name, times in owned.items() if times > 1] == []


def test_the_merged_lists_hold_hamis_names_before_volcanos() -> None:
    assert ANNOTATIONS.use_uuids == (*hami.ANNOTATIONS.use_uuids, *volcano.ANNOTATIONS.use_uuids)
    assert ANNOTATIONS.mode == ("nvidia.com/vgpu-mode", "volcano.sh/vgpu-mode")
    assert {*hami.RESOURCES.all(), *volcano.RESOURCES.all()} == TRANSLATED_RESOURCES


def test_only_kai_states_a_request_in_annotations() -> None:
    assert [d.family for d in DIALECTS if d.annotations.request] == ["KAI"]
    assert [d.family for d in DIALECTS if d.resources] == ["HAMi", "Volcano"]


def pod(annotations: dict[str, str], *containers: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
        "spec": {"containers": list(containers)},
    }


def test_kais_request_goes_to_the_named_container() -> None:
    obj = pod(
        {kai.MEMORY: "2048", kai.CONTAINER_NAME: "second"},
        {"name": "first", "image": "x"},
        {"name": "second", "image": "x"},
    )
    plan = translate(obj, context=TranslationContext())
    paths = [op["path"] for op in plan.patch if op["path"].endswith("/resources")]
    assert paths == ["/spec/containers/1/resources"]


@pytest.mark.parametrize(
    ("resources", "reason"),
    [
        ({"limits": {"nvidia.com/gpu": 1}}, "through resources and through KAI's annotations"),
        (
            {"limits": {"nvidia.com/gpu": 1, "volcano.sh/vgpu-number": 1}},
            "mixes HAMi (nvidia.com/gpu, …) and Volcano (volcano.sh/vgpu-number, …)",
        ),
    ],
    ids=["resources-and-kai", "hami-and-volcano"],
)
def test_a_container_states_its_share_in_one_dialect(
    resources: dict[str, Any], reason: str
) -> None:
    obj = pod({kai.FRACTION: "0.5"}, {"name": "c", "image": "x", "resources": resources})
    with pytest.raises(InvalidRequest) as caught:
        translate(obj, context=TranslationContext())
    assert [e.path for e in caught.value.errors if reason in e.reason] == [
        "spec.containers[0].resources"
    ]
