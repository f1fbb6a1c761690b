"""The node agent's layering, checked on its source: pure builders do no I/O, only `grpc.py`
speaks protobuf, and the agent never reaches into the webhook or the adapters."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_import_rules import IO_MODULES, PACKAGE_ROOT, _imports

NODE = PACKAGE_ROOT / "node"
MODULES = sorted(p for p in NODE.glob("*.py"))
PURE = ("slices.py", "allocation.py")


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_the_agent_imports_only_core_the_shared_client_and_itself(path: Path) -> None:
    shared = (
        "vgpu_bridge.core",
        "vgpu_bridge.node",
        "vgpu_bridge.kube",
        "vgpu_bridge.flag_settings",
        "vgpu_bridge.logs",
    )
    for name in _imports(path):
        if name.split(".")[0] == "vgpu_bridge":
            assert name.startswith(shared), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_only_the_grpc_module_speaks_protobuf(path: Path) -> None:
    speaks = {n for n in _imports(path) if n == "grpc" or ".kubeletapi" in n}
    assert not speaks or path.name == "grpc.py", f"{path.name} imports {sorted(speaks)}"


@pytest.mark.parametrize("name", PURE)
def test_the_builders_do_no_io(name: str) -> None:
    for imported in _imports(NODE / name):
        assert imported.split(".")[0] not in IO_MODULES, f"{name} imports {imported}"
        assert imported not in ("vgpu_bridge.kube", "vgpu_bridge.node.files")


def test_the_rules_see_the_agent() -> None:
    assert {p.name for p in MODULES} >= {"grpc.py", "state.py", *PURE}
