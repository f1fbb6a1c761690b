"""The fast path never skips a pod the translator would act on: every name core reads (from
core's own lists) sends a pod down the full path; only plain pods take the fast one."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.core import dialects
from vgpu_bridge.webhook.fastpath import (
    GPU_KEY_MARKERS,
    GPU_KEY_PREFIXES,
    gpu_key_markers,
    may_ask_for_gpus,
    may_name_gpus,
)

RESOURCES = sorted(dialects.TRANSLATED_RESOURCES)
ANNOTATIONS = sorted(set(dialects.ANNOTATIONS.all()) - {dialects.kai.MPS})


def pod(resources: dict[str, Any] | None = None, *, annotations: Any = None,
        init: bool = False) -> dict[str, Any]:  # fmt: skip
    container = {"name": "c", "image": "x", "resources": resources or {"limits": {"cpu": "1"}}}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}], "initContainers": []}
    spec["initContainers" if init else "containers"].append(container)
    return {"metadata": {"name": "p", "annotations": annotations or {}}, "spec": spec}


def test_a_plain_pod_takes_the_fast_path() -> None:
    assert not may_ask_for_gpus("Pod", pod({"limits": {"cpu": "1", "memory": "1Gi"}}))


@pytest.mark.parametrize("resource", RESOURCES)
@pytest.mark.parametrize("section", ["limits", "requests"])
@pytest.mark.parametrize("init", [False, True], ids=["container", "init-container"])
def test_every_resource_name_core_translates_takes_the_full_path(
    resource: str, section: str, init: bool
) -> None:
    assert may_ask_for_gpus("Pod", pod({section: {resource: 1}}, init=init))


@pytest.mark.parametrize("annotation", ANNOTATIONS)
def test_every_annotation_core_reads_takes_the_full_path(annotation: str) -> None:
    assert may_ask_for_gpus("Pod", pod(annotations={annotation: "1"}))


@pytest.mark.parametrize(
    "odd",
    [
        {"metadata": "x", "spec": {}},
        {"metadata": {}, "spec": {"containers": "x"}},
        {"metadata": {}, "spec": {"containers": [{"resources": "x"}]}},
        {"metadata": {}, "spec": {"containers": [{"resources": {"limits": ["x"]}}]}},
        {"metadata": {"annotations": "x"}, "spec": {}},
    ],
)
def test_anything_unusual_takes_the_full_path(odd: dict[str, Any]) -> None:
    assert may_ask_for_gpus("Pod", odd)


def test_other_kinds_always_take_the_full_path() -> None:
    assert may_ask_for_gpus("PodGroup", {"spec": {"minResources": {"cpu": "1"}}})
    assert may_ask_for_gpus("Deployment", {"spec": {}})


def test_the_byte_look_sees_every_prefix_and_renamed_names_only() -> None:
    for prefix in GPU_KEY_PREFIXES:
        assert may_name_gpus(b'{"limits": {"' + prefix.encode() + b'x": 1}}')
    renamed = b'{"limits": {"example.com/vgpu": 1}}'
    assert not may_name_gpus(renamed)
    assert may_name_gpus(renamed, markers=gpu_key_markers(["example.com/vgpu"]))
    assert not may_name_gpus(b'{"limits": {"cpu": "1", "memory": "1Gi"}}')


def test_the_byte_look_scans_for_a_renamed_resource_only_outside_the_prefixes() -> None:
    """Every review's raw bytes are scanned once per marker: HAMi's default names start with
    `nvidia.com/`, already a marker, so they add no scan; a name outside the prefixes does."""
    default = gpu_key_markers(["nvidia.com/gpu", "nvidia.com/gpumem", "hami.io/x"])
    assert default == GPU_KEY_MARKERS
    assert gpu_key_markers(["example.com/vgpu"]) == (*GPU_KEY_MARKERS, b"example.com/vgpu")
