"""Which adapter handles an object."""

from __future__ import annotations

import pytest

from vgpu_bridge.adapters import default_registry


def test_registry_falls_back_to_the_plain_adapter_and_names_unknown_ones() -> None:
    registry = default_registry()
    assert registry.pick({"kind": "Pod"}).name == "default"
    assert registry.pick({"kind": "Pod"}, "default").name == "default"
    with pytest.raises(KeyError, match="known: auto, default"):
        registry.get("slurm")
