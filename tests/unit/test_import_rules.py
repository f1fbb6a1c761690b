"""DESIGN §2 import rules, checked on the source tree.

- `core` imports nothing of ours but itself, and nothing that performs I/O or logs.
- each adapter package imports only `core` and the shared adapter modules (`base`); adapters never
  import each other. Only the shared `registry` module knows every adapter.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "vgpu_bridge"

# Modules whose use means I/O, logging or process control: forbidden in the pure layers.
IO_MODULES = frozenset(
    {
        "asyncio",
        "grpc",
        "http",
        "io",
        "kubernetes",
        "logging",
        "os",
        "pathlib",
        "shutil",
        "socket",
        "structlog",
        "subprocess",
        "sys",
        "tempfile",
        "urllib",
        "yaml",
    }
)


def _imports(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    module = ".".join(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against this module's package
                base = module.split(".")[: -node.level]
                yield ".".join([*base, node.module] if node.module else base)
            else:
                yield node.module or ""


def _modules_under(sub: str) -> list[Path]:
    return sorted((PACKAGE_ROOT / sub).rglob("*.py"))


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(PACKAGE_ROOT)) for p in paths]


CORE_MODULES = _modules_under("core")
ADAPTER_MODULES = _modules_under("adapters")


@pytest.mark.parametrize("path", CORE_MODULES, ids=_ids(CORE_MODULES))
def test_core_imports_only_itself_and_no_io(path: Path) -> None:
    for name in _imports(path):
        top = name.split(".")[0]
        if top == "vgpu_bridge":
            assert name.startswith("vgpu_bridge.core"), f"{path.name} imports {name}"
        assert top not in IO_MODULES, f"{path.name} imports {name}, which does I/O"


@pytest.mark.parametrize("path", ADAPTER_MODULES, ids=_ids(ADAPTER_MODULES))
def test_adapters_import_only_core_and_never_each_other(path: Path) -> None:
    parts = path.relative_to(PACKAGE_ROOT / "adapters").parts
    own = parts[0] if len(parts) > 1 else None  # plain/, volcano/, kai/ or a shared module
    for name in _imports(path):
        top = name.split(".")[0]
        assert top not in IO_MODULES, f"{path.name} imports {name}, which does I/O"
        if top != "vgpu_bridge" or name.startswith("vgpu_bridge.core"):
            continue
        assert name.startswith("vgpu_bridge.adapters"), f"{path.name} imports {name}"
        other = name.split(".")[2] if name.count(".") >= 2 else None
        shared = other is None or (PACKAGE_ROOT / "adapters" / f"{other}.py").exists()
        if own is None:  # a shared module: the registry may know every adapter
            continue
        assert other != "registry", f"adapter {own} imports the registry"
        assert shared or other == own, f"adapter {own} imports adapter {other}"


def test_the_rules_see_the_packages_they_guard() -> None:
    assert CORE_MODULES, "no core modules found: the rule checks nothing"
    assert ADAPTER_MODULES, "no adapter modules found: the rule checks nothing"
