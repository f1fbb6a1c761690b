"""The node agent's layering, checked on its source: pure builders do no I/O, only the kubelet's
two sockets speak protobuf (`grpc.py` serves the plugin; `pod_resources.py` asks the kubelet),
and the agent never reaches into the webhook or the adapters."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_import_rules import IO_MODULES, PACKAGE_ROOT, _imports

NODE = PACKAGE_ROOT / "node"
MODULES = sorted([*NODE.glob("*.py"), *NODE.glob("device_health/*.py")])
PURE = ("slices.py", "allocation.py")
GRPC_MODULES = ("grpc.py", "pod_resources.py")


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(NODE)) for p in MODULES])
def test_the_agent_imports_only_core_the_shared_client_and_itself(path: Path) -> None:
    shared = (
        "vgpu_bridge.core",
        "vgpu_bridge.node",
        "vgpu_bridge.kube",
        "vgpu_bridge.flag_settings",
        "vgpu_bridge.logs",
        "vgpu_bridge.atomic_files",
        "vgpu_bridge.build_info",
    )
    for name in _imports(path):
        if name.split(".")[0] == "vgpu_bridge":
            assert name.startswith(shared), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(NODE)) for p in MODULES])
def test_only_the_grpc_module_speaks_protobuf(path: Path) -> None:
    speaks = {n for n in _imports(path) if n == "grpc" or ".kubeletapi" in n}
    assert not speaks or path.name in GRPC_MODULES, f"{path.name} imports {sorted(speaks)}"


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(NODE)) for p in MODULES])
def test_no_module_builds_protobuf_messages_by_hand(path: Path) -> None:
    """The kubelet's messages come from the stubs generated from the vendored protos (one place
    to move to another release, checked fresh), never from descriptors declared in code."""
    by_hand = {n for n in _imports(path) if n.split(".")[0] == "google"}
    assert not by_hand, f"{path.name} imports {sorted(by_hand)}: use vgpu_bridge.node.kubeletapi"


@pytest.mark.parametrize("name", PURE)
def test_the_builders_do_no_io(name: str) -> None:
    for imported in _imports(NODE / name):
        assert imported.split(".")[0] not in IO_MODULES, f"{name} imports {imported}"
        assert imported not in ("vgpu_bridge.kube", "vgpu_bridge.node.files")


def test_the_rules_see_the_agent() -> None:
    assert {p.name for p in MODULES} >= {"grpc.py", "state.py", *PURE}


def _node_imports(path: Path) -> set[str]:
    """The agent's own modules `path` imports, by file name."""
    prefix = "vgpu_bridge.node."
    names = {n[len(prefix) :].split(".")[0] for n in _imports(path) if n.startswith(prefix)}
    return {f"{n}.py" for n in names if (NODE / f"{n}.py").exists()}


def test_the_agents_modules_import_no_circle() -> None:
    graph = {path.name: _node_imports(path) for path in MODULES}
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> None:
        assert name not in trail, f"import circle: {' -> '.join((*trail, name))}"
        if name not in done:
            for imported in sorted(graph.get(name, ())):
                visit(imported, (*trail, name))
            done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_the_region_format_is_read_in_one_module_that_needs_no_collector() -> None:
    assert _node_imports(NODE / "region.py") <= {"files.py"}
    for name in ("hostpids.py", "metrics.py"):
        assert "region.py" in _node_imports(NODE / name)
        assert "REGION_MAGIC" not in (NODE / name).read_text()
