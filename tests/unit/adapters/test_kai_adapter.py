"""KAI's quirks: recognition, no firstAvailable, its annotations removed, the version gate."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.adapters import default_registry
from vgpu_bridge.adapters.kai import KaiAdapter
from vgpu_bridge.adapters.kai.adapter import has_consumable_capacity
from vgpu_bridge.core import InvalidRequest, Inventory, TranslationContext

ONE_SIZE = TranslationContext(inventory=Inventory({"gpu.vgpu-bridge.io": frozenset({80 * 2**30})}))


def kai_pod(annotations: dict[str, str], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n", "annotations": annotations, "labels": labels},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]},
    }


def test_kai_pods_are_recognised_by_scheduler_name_or_queue_label() -> None:
    registry = default_registry()
    assert registry.pick(kai_pod({})).name == "kai"
    by_label = kai_pod({}, **{"kai.scheduler/queue": "q"})
    by_label["spec"].pop("schedulerName")
    assert registry.pick(by_label).name == "kai"
    plain = kai_pod({})
    plain["spec"].pop("schedulerName")
    assert registry.pick(plain).name == "default"


def test_gpu_memory_becomes_a_share_and_kai_annotations_go() -> None:
    pod = kai_pod(
        {"gpu-memory": "2048", "mps": "true", "team": "a"}, **{"kai.scheduler/queue": "q"}
    )
    plan = KaiAdapter().translate(pod, context=ONE_SIZE)
    translated = plan.apply_to(pod)
    assert translated["metadata"]["annotations"] == {"team": "a"}
    assert translated["metadata"]["labels"]["kai.scheduler/queue"] == "q"
    assert translated["spec"]["schedulerName"] == "kai-scheduler"
    [template] = plan.templates
    request = template["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["capacity"]["requests"] == {
        "memory": "2Gi",
        "cores": "0",
        "milliCores": "1",
    }


def test_fraction_with_one_card_size_is_an_exact_request_never_first_available() -> None:
    plan = KaiAdapter().translate(kai_pod({"gpu-fraction": "0.25"}), context=ONE_SIZE)
    [template] = plan.templates
    request = template["spec"]["spec"]["devices"]["requests"][0]
    assert "firstAvailable" not in request
    assert request["exactly"]["capacity"]["requests"]["memory"] == "20Gi"


def test_fraction_with_two_card_sizes_is_refused() -> None:
    sizes = frozenset({40 * 2**30, 80 * 2**30})
    context = TranslationContext(inventory=Inventory({"gpu.vgpu-bridge.io": sizes}))
    with pytest.raises(InvalidRequest, match="cannot choose among alternatives"):
        KaiAdapter().translate(kai_pod({"gpu-fraction": "0.5"}), context=context)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("v0.17.0", False),
        ("v0.16.2", False),
        ("0.9.1", False),
        ("v0.17.0-12-gabc1234", None),
        ("v0.17.1-0.20260803101500-0123456789ab", False),
        ("v0.17.1-0.20260826090000-0123456789ab", True),
        ("v0.0.0-20260803101500-0123456789ab", False),
        ("v0.0.0-20260826090000-0123456789ab", True),
        ("v0.0.0-20260824235959-0123456789ab", False),  # the day before #2102 merged
        ("v0.0.0-20260825000000-0123456789ab", True),  # the day it merged: dated on or after
        ("0.0.0-20260826090000-0123456789ab", True),
        ("v0.17.1-rc.1.0.20260803101500-0123456789ab", False),
        ("v0.17.0-rc.1.0.20260826090000-0123456789ab", True),
        ("v0.17.0-pre.0.20260826090000-0123456789ab+incompatible", True),
        ("v0.17.1", True),
        ("v0.18.0-rc.1", True),
        ("v1.0.0", True),
        ("main", None),
    ],
)
def test_kai_versions_with_consumable_capacity(version: str, expected: bool | None) -> None:
    assert has_consumable_capacity(version) is expected


def test_old_kai_is_warned_about_or_refused_as_configured() -> None:
    pod = kai_pod({"gpu-memory": "1024"})
    warned = KaiAdapter(version="v0.17.0").translate(pod, context=ONE_SIZE)
    assert any("allocates without consumable capacity" in w for w in warned.warnings)
    with pytest.raises(InvalidRequest, match=r"spec.schedulerName: KAI v0.17.0 allocates without"):
        KaiAdapter(version="v0.17.0", refuse_without_capacity=True).translate(pod, context=ONE_SIZE)
    assert not KaiAdapter(version="v0.18.0").translate(pod, context=ONE_SIZE).warnings


def test_pod_without_gpu_request_is_not_gated() -> None:
    plan = KaiAdapter(version="v0.10.0", refuse_without_capacity=True).translate(
        kai_pod({}), context=ONE_SIZE
    )
    assert not plan.changes_object
