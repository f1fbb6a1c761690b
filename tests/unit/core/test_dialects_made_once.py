"""The dialects of a config are made once, not at every translation (issue 35's A/B: two
copies of HAMi's and Volcano's dialects per GPU review were ~6 µs of its ~200)."""

from __future__ import annotations

from vgpu_bridge.core.config import TranslatorConfig
from vgpu_bridge.core.dialects import dialects_for


def test_an_equal_config_gets_the_same_dialects() -> None:
    first = dialects_for(TranslatorConfig(memory_factor=2))
    assert dialects_for(TranslatorConfig(memory_factor=2)) is first


def test_a_renamed_resource_still_gets_its_own_dialects() -> None:
    plain = dialects_for(TranslatorConfig())
    renamed = dialects_for(TranslatorConfig(resource_count_name="nvidia.com/vgpu"))
    assert "nvidia.com/vgpu" in renamed[0].resources
    assert "nvidia.com/vgpu" not in plain[0].resources
