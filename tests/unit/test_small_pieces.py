"""Quantities, CEL literals, JSON patch, claim names, inventory, workload kinds, the registry."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from vgpu_bridge.adapters import default_registry
from vgpu_bridge.core import InvalidRequest, Inventory
from vgpu_bridge.core.cel import cel_string
from vgpu_bridge.core.jsonpatch import apply_patch, escape
from vgpu_bridge.core.quantity import QuantityError, format_bytes, parse_quantity
from vgpu_bridge.core.translate import pod_claim_name
from vgpu_bridge.core.workloads import object_ref, pod_templates


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (3000, Decimal(3000)),
        ("3000", Decimal(3000)),
        ("10Gi", Decimal(10 * 2**30)),
        ("1.5Ki", Decimal(1536)),
        ("500m", Decimal("0.5")),
        ("2k", Decimal(2000)),
        ("1e3", Decimal(1000)),
        (0.25, Decimal("0.25")),
        ("-4", Decimal(-4)),
    ],
)
def test_parse_quantity_reads_kubernetes_quantities(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["abc", "", "1GB", "Gi", "1.2.3", True, None, [1]])
def test_parse_quantity_refuses_what_kubernetes_refuses(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("count", "text"),
    [(2**30, "1Gi"), (1536 * 2**20, "1536Mi"), (80 * 2**30, "80Gi"), (1000, "1000"), (0, "0")],
)
def test_format_bytes_is_canonical(count: int, text: str) -> None:
    assert format_bytes(count) == text


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("A100", '"A100"'),
        ('a") || true || ("', '"a\\") || true || (\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("line\nbreak\x01", '"line\\nbreak\\x01"'),
    ],
)
def test_cel_string_keeps_every_value_inside_one_literal(value: str, literal: str) -> None:
    assert cel_string(value) == literal


def test_json_patch_add_remove_and_append_leave_the_input_alone() -> None:
    doc: dict[str, Any] = {"a": {"x/y": 1, "k": 2}, "l": [1]}
    ops: list[dict[str, Any]] = [
        {"op": "remove", "path": f"/a/{escape('x/y')}"},
        {"op": "add", "path": "/l/-", "value": 2},
        {"op": "add", "path": "/b", "value": {"c": 3}},
        {"op": "replace", "path": "/a/k", "value": 5},
    ]
    assert apply_patch(doc, ops) == {"a": {"k": 5}, "l": [1, 2], "b": {"c": 3}}
    assert doc == {"a": {"x/y": 1, "k": 2}, "l": [1]}


def test_pod_claim_names_stay_dns_labels() -> None:
    assert pod_claim_name("main") == "gpu-main"
    long = pod_claim_name("c" * 63)
    assert len(long) <= 63
    assert long != pod_claim_name("c" * 62 + "d")


def test_inventory_reads_sizes_per_driver_from_v1_and_v1beta1_slices() -> None:
    slices = [
        {"spec": {"driver": "d", "devices": [{"capacity": {"memory": {"value": "80Gi"}}}]}},
        {
            "spec": {
                "driver": "d",
                "devices": [{"basic": {"capacity": {"memory": {"value": "40Gi"}}}}],
            }
        },
        {"spec": {"driver": "e", "devices": [{"capacity": {"e/memory": {"value": "16Gi"}}}]}},
        {"spec": {"driver": "d", "devices": [{"capacity": {"cores": {"value": "100"}}}]}},
    ]
    inventory = Inventory.from_slices(slices)
    assert inventory.sizes("d") == (40 * 2**30, 80 * 2**30)
    assert inventory.sizes("e") == (16 * 2**30,)
    assert inventory.sizes("unknown") == ()


def test_inventory_names_the_slice_with_a_bad_size() -> None:
    bad = [
        {
            "metadata": {"name": "s1"},
            "spec": {"driver": "d", "devices": [{"capacity": {"memory": {"value": "lots"}}}]},
        }
    ]
    with pytest.raises(InvalidRequest, match=r"ResourceSlice/s1: spec.devices\[0\].capacity"):
        Inventory.from_slices(bad)


@pytest.mark.parametrize(
    ("api_version", "kind", "pointer"),
    [
        ("v1", "Pod", "/spec"),
        ("apps/v1", "Deployment", "/spec/template/spec"),
        ("apps/v1", "StatefulSet", "/spec/template/spec"),
        ("apps/v1", "DaemonSet", "/spec/template/spec"),
        ("apps/v1", "ReplicaSet", "/spec/template/spec"),
        ("v1", "ReplicationController", "/spec/template/spec"),
        ("batch/v1", "Job", "/spec/template/spec"),
        ("batch/v1", "CronJob", "/spec/jobTemplate/spec/template/spec"),
        ("batch.volcano.sh/v1alpha1", "Job", "/spec/tasks/0/template/spec"),
    ],
)
def test_pod_templates_are_found_in_every_workload_kind(
    api_version: str, kind: str, pointer: str
) -> None:
    template: dict[str, Any] = {"metadata": {}, "spec": {"containers": []}}
    spec: dict[str, Any] = {"template": template}
    if kind == "CronJob":
        spec = {"jobTemplate": {"spec": {"template": template}}}
    if api_version.startswith("batch.volcano.sh"):
        spec = {"tasks": [{"template": template}]}
    obj = {
        "apiVersion": api_version,
        "kind": kind,
        "spec": template["spec"] if kind == "Pod" else spec,
    }
    assert [t.spec_pointer for t in pod_templates(obj)] == [pointer]


def test_batch_job_is_not_mistaken_for_a_volcano_job() -> None:
    obj = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"tasks": [{"template": {"spec": {}}}]}}
    assert pod_templates(obj) == []


def test_object_ref_names_generate_name_objects() -> None:
    obj = {"kind": "Pod", "metadata": {"generateName": "web-", "namespace": "a"}}
    assert object_ref(obj) == "Pod/a/web-*"


def test_registry_falls_back_to_the_plain_adapter_and_names_unknown_ones() -> None:
    registry = default_registry()
    assert registry.pick({"kind": "Pod"}).name == "default"
    assert registry.pick({"kind": "Pod"}, "default").name == "default"
    with pytest.raises(KeyError, match="known: auto, default"):
        registry.get("slurm")
