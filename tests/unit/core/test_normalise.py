"""Legacy HAMi defaults (hami.md §1.2), one row per rule."""

from __future__ import annotations

from decimal import Decimal

import pytest

from vgpu_bridge.core import GpuRequest, TranslatorConfig
from vgpu_bridge.core.models import Problems, RawRequest
from vgpu_bridge.core.normalise import normalise

SOURCES = {
    "count": "c",
    "memory_mib": "m",
    "memory_percent": "p",
    "cores": "k",
    "priority": "q",
}
HAMI_DEFAULTS = TranslatorConfig()


def _raw(**given: int | Decimal) -> RawRequest:
    return RawRequest(**given, sources=dict(SOURCES))  # type: ignore[arg-type]


CASES = [
    pytest.param(
        _raw(count=2),
        HAMI_DEFAULTS,
        GpuRequest(count=2, memory_percent=Decimal(100), cores=100),
        id="count-only-means-whole-exclusive-cards",
    ),
    pytest.param(
        _raw(memory_mib=3000),
        HAMI_DEFAULTS,
        GpuRequest(count=1, memory_mib=3000, cores=0),
        id="gpumem-without-count-gets-default-count-and-no-core-limit",
    ),
    pytest.param(
        _raw(cores=40),
        HAMI_DEFAULTS,
        GpuRequest(count=1, memory_percent=Decimal(100), cores=40),
        id="cores-without-memory-keep-whole-memory-with-given-cores",
    ),
    pytest.param(
        _raw(count=1, memory_percent=Decimal(100)),
        HAMI_DEFAULTS,
        GpuRequest(count=1, memory_percent=Decimal(100), cores=100),
        id="percentage-100-is-exclusive",
    ),
    pytest.param(
        _raw(count=1, memory_percent=Decimal(30)),
        HAMI_DEFAULTS,
        GpuRequest(count=1, memory_percent=Decimal(30), cores=0),
        id="percentage-share-has-no-core-limit",
    ),
    pytest.param(
        _raw(count=1, memory_mib=100, memory_percent=Decimal(30)),
        HAMI_DEFAULTS,
        GpuRequest(count=1, memory_mib=100, cores=0),
        id="gpumem-wins-over-percentage",
    ),
    pytest.param(
        _raw(count=1),
        TranslatorConfig(default_memory=2048, default_cores=25),
        GpuRequest(count=1, memory_mib=2048, cores=25),
        id="default-memory-makes-a-share-with-default-cores",
    ),
    pytest.param(
        _raw(memory_mib=4),
        TranslatorConfig(memory_factor=1024, default_gpu_num=2),
        GpuRequest(count=2, memory_mib=4096, cores=0),
        id="memory-factor-scales-gpumem-and-default-gpu-num-applies",
    ),
    pytest.param(
        _raw(count=1, priority=1),
        HAMI_DEFAULTS,
        GpuRequest(count=1, memory_percent=Decimal(100), cores=100, priority=1),
        id="priority-is-carried",
    ),
]


@pytest.mark.parametrize(("raw", "config", "expected"), CASES)
def test_normalise_follows_legacy_hami(
    raw: RawRequest, config: TranslatorConfig, expected: GpuRequest
) -> None:
    problems, warnings = Problems(), list[str]()
    assert normalise(raw, config=config, problems=problems, warnings=warnings) == expected
    assert not problems


def test_gpumem_beside_percentage_warns_that_percentage_is_ignored() -> None:
    warnings: list[str] = []
    raw = _raw(count=1, memory_mib=100, memory_percent=Decimal(30))
    normalise(raw, config=HAMI_DEFAULTS, problems=Problems(), warnings=warnings)
    assert warnings == ["p is ignored: m is set and wins, as in HAMi"]


def test_zero_count_with_a_share_is_refused_at_the_count_field() -> None:
    problems = Problems()
    raw = _raw(count=0, memory_mib=100)
    assert normalise(raw, config=HAMI_DEFAULTS, problems=problems, warnings=[]) is None
    assert [e.path for e in problems.errors] == ["c"]
