"""DESIGN §2 import rules, checked on the source tree.

- `core` imports nothing of ours but itself, and nothing that performs I/O or logs.
- each adapter package imports only `core` and the shared adapter modules (`base`); adapters never
  import each other. Only the shared `registry` module knows every adapter.
- `webhook` and `node` never import each other: what they share lives in `core` (the opaque
  config, the profile) or in a top-level module.
- only `vgpu_bridge.kube` imports the Kubernetes client (`kubernetes`, and `urllib3` beneath it);
  everyone else talks to the API through it.

The rules name packages, never file lists: a module moved inside a package stays under its rule.
Every import counts: top-level, inside functions, under `TYPE_CHECKING`, relative, and
`importlib.import_module("...")` / `__import__("...")` with a literal name.
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


def _imports(path: Path, root: Path = PACKAGE_ROOT) -> Iterator[str]:
    """Every module name `path` imports; `from a import b` gives `a` and `a.b` (b may be one)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, module)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and (name := _dynamic_import(node)) is not None:
            yield name


def _from_base(node: ast.ImportFrom, module: str) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: -node.level]  # relative: resolve against this module's package
    return ".".join([*base, node.module] if node.module else base)


def _dynamic_import(node: ast.Call) -> str | None:
    """The literal name of `importlib.import_module("x")` or `__import__("x")`, else None."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    first = node.args[0] if node.args else None
    if called in ("import_module", "__import__") and isinstance(first, ast.Constant):
        return first.value if isinstance(first.value, str) else None
    return None


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _modules_under(sub: str) -> list[Path]:
    return sorted((PACKAGE_ROOT / sub).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(PACKAGE_ROOT)) for p in paths]


CORE_MODULES = _modules_under("core")
ADAPTER_MODULES = _modules_under("adapters")
WEBHOOK_MODULES = _modules_under("webhook")
NODE_MODULES = _modules_under("node")
KUBE_CLIENT = ("kubernetes", "urllib3")  # the client and the transport it brings
KUBE_GATEWAY = "vgpu_bridge.kube"  # the one module (or, one day, package) that may import it
NOT_KUBE_MODULES = [
    p for p in sorted(PACKAGE_ROOT.rglob("*.py")) if not _within(_module_name(p), KUBE_GATEWAY)
]


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


@pytest.mark.parametrize(
    "path", WEBHOOK_MODULES + NODE_MODULES, ids=_ids(WEBHOOK_MODULES + NODE_MODULES)
)
def test_webhook_and_node_never_import_each_other(path: Path) -> None:
    own = _module_name(path).split(".")[1]
    other = "vgpu_bridge.node" if own == "webhook" else "vgpu_bridge.webhook"
    for name in _imports(path):
        assert not _within(name, other), f"{_module_name(path)} imports {name}"


@pytest.mark.parametrize("path", NOT_KUBE_MODULES, ids=_ids(NOT_KUBE_MODULES))
def test_only_the_kube_module_imports_the_kubernetes_client(path: Path) -> None:
    for name in _imports(path):
        assert name.split(".")[0] not in KUBE_CLIENT, (
            f"{_module_name(path)} imports {name}: go through {KUBE_GATEWAY}"
        )


def test_the_rules_see_the_packages_they_guard() -> None:
    assert CORE_MODULES, "no core modules found: the rule checks nothing"
    assert ADAPTER_MODULES, "no adapter modules found: the rule checks nothing"
    assert WEBHOOK_MODULES, "no webhook modules found: the rule checks nothing"
    assert NODE_MODULES, "no node modules found: the rule checks nothing"
    gateway = [p for p in PACKAGE_ROOT.rglob("*.py") if _within(_module_name(p), KUBE_GATEWAY)]
    assert any(_within(name, "kubernetes") for p in gateway for name in _imports(p)), (
        f"{KUBE_GATEWAY} no longer imports the client: the rule names the wrong module"
    )


def test_every_kind_of_import_is_seen(tmp_path: Path) -> None:
    package = tmp_path / "vgpu_bridge" / "webhook"
    package.mkdir(parents=True)
    module = package / "sneaky.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from kubernetes.client import ApiClient\n"
        "from .. import node\n"
        "def later():\n"
        "    from ..node.state import State\n"
        "    import importlib\n"
        "    importlib.import_module('urllib3')\n"
        "    __import__('vgpu_bridge.node.grpc')\n"
    )
    seen = set(_imports(module, root=tmp_path / "vgpu_bridge"))
    assert {"kubernetes.client", "vgpu_bridge.node", "vgpu_bridge.node.state", "urllib3"} <= seen
    assert "vgpu_bridge.node.grpc" in seen
