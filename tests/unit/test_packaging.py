"""pyproject's dependencies per role: a bare install runs `translate` and `status` (the
`kubectl vgpu` viewer), `[webhook]` adds what the webhook imports, `[node]` what the node agent
imports, and a role command run without its extra says which extra is missing.

Checked two ways: statically (every third-party module each command's modules import belongs
to a distribution its requirements bring, transitively) and by running the commands in a fresh
interpreter where the extras' modules cannot be imported (what a bare install has).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from vgpu_bridge import cli

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "vgpu_bridge"
#: what each command imports (the CLI imports its command's modules lazily, inside functions)
ROLES = {
    "translate": (None, ["vgpu_bridge.translate_command"]),
    "status": (None, ["vgpu_bridge.status.command"]),
    "webhook": ("webhook", ["vgpu_bridge.webhook.settings", "vgpu_bridge.webhook.app"]),
    "node": (
        "node",
        ["vgpu_bridge.node.settings", "vgpu_bridge.node.app", "vgpu_bridge.node.library"],
    ),
}
#: imported under a guard, for the generated stubs' own checks; never at run time
GENERATED = "vgpu_bridge.node.kubeletapi.NONE"


def pyproject() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project


def requirements(extra: str | None) -> list[str]:
    project = pyproject()
    base = project["dependencies"]
    extras = project["optional-dependencies"]
    assert isinstance(base, list)
    assert isinstance(extras, dict)
    return [*base, *(extras[extra] if extra else [])]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement.strip())
    assert match is not None, requirement
    return normalized(match.group(0))


def brought_by(requirements: list[str]) -> set[str]:
    """The distributions these requirements install: themselves and their own requirements,
    transitively (requirements of extras not asked for are left out)."""
    todo = [requirement_name(r) for r in requirements]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            required = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # left out by its marker (e.g. python_version < "3.11")
        seen.add(name)
        todo += [requirement_name(line) for line in required if "extra ==" not in line]
    return seen


def module_path(name: str) -> Path:
    path = PACKAGE.parent / Path(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def imports_of(name: str) -> Iterator[str]:
    path = module_path(name)
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def third_party_imports(modules: list[str]) -> set[str]:
    """Every module outside the project and the standard library that `modules` import, and
    what they import of ours, transitively (imports inside functions count)."""
    found: set[str] = set()
    todo, seen = list(modules), set()
    while todo:
        name = todo.pop()
        if name in seen or name.startswith(GENERATED):
            continue
        seen.add(name)
        for imported in imports_of(name):
            top = imported.split(".")[0]
            if top == "vgpu_bridge":
                parts = imported.split(".")
                todo += [
                    ".".join(parts[:n])
                    for n in range(1, len(parts) + 1)
                    if module_path(".".join(parts[:n])).is_file()
                ]
            elif top not in sys.stdlib_module_names and top != "__future__":
                found.add(imported)
    return found


@cache
def owners() -> dict[Path, str]:
    """Installed file -> the distribution it belongs to."""
    files: dict[Path, str] = {}
    for distribution in importlib.metadata.distributions():
        for file in distribution.files or []:
            files[Path(str(distribution.locate_file(file))).resolve()] = normalized(
                distribution.metadata["Name"]
            )
    return files


def distribution_of(module: str) -> str:
    """The distribution that installs `module` (the longest importable prefix of the name that
    is not a namespace package: `google.protobuf`, not `google`)."""
    parts = module.split(".")
    for n in range(1, len(parts) + 1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:n]))
        except ModuleNotFoundError:
            break
        if spec is not None and spec.origin not in (None, "namespace"):
            return owners()[Path(spec.origin).resolve()]
    raise AssertionError(f"{module}: not importable here (is the [dev] extra installed?)")


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_commands_imports_come_with_its_requirements(role: str) -> None:
    extra, modules = ROLES[role]
    installed = brought_by(requirements(extra))
    needed = {module: distribution_of(module) for module in third_party_imports(modules)}
    assert needed, "the import graph found nothing: the walk is broken"
    missing = {module: d for module, d in needed.items() if d not in installed}
    assert not missing, f"{role} imports these, which {extra or 'a bare install'} lacks: {missing}"


def test_extras_hold_only_what_their_role_needs_beyond_a_bare_install() -> None:
    """No extra repeats the bare install's requirements, and the bare install carries nothing
    that only a role imports."""
    base = {requirement_name(r) for r in requirements(None)}
    for extra in ("webhook", "node"):
        assert base.isdisjoint(requirement_name(r) for r in requirements(extra)[len(base) :])
    bare = set()
    for role in ("translate", "status"):
        bare |= {distribution_of(m) for m in third_party_imports(ROLES[role][1])}
    assert {d for d in base if d not in bare} == set(), "a bare-install requirement nobody needs"


def extras_only_modules() -> list[str]:
    """Importable names that only the extras install: blocked to stand for a bare install."""
    base = brought_by(requirements(None))
    extra_only = (brought_by(requirements("webhook")) | brought_by(requirements("node"))) - base
    names: set[str] = set()
    for distribution in extra_only:
        for file in importlib.metadata.distribution(distribution).files or []:
            parts = file.parts
            if parts[0].endswith((".dist-info", ".data")) or file.suffix not in (".py", ".so"):
                continue
            top = parts[0].removesuffix(".py").split(".")[0]
            namespace = len(parts) > 2 and not importlib.util.find_spec(top).origin  # type: ignore[union-attr]
            names.add(f"{top}.{parts[1]}" if namespace else top)
    return sorted(names)


@pytest.mark.parametrize("role", sorted(cli.EXTRAS))
def test_the_cli_checks_exactly_the_extras_modules_its_role_imports(role: str) -> None:
    extra_only = extras_only_modules()
    used = {
        module
        for imported in third_party_imports(ROLES[role][1])
        for module in extra_only
        if imported == module or imported.startswith(module + ".")
    }
    assert cli.EXTRAS[role] == (role, tuple(cli.EXTRAS[role][1]))
    assert set(cli.EXTRAS[role][1]) == used


BARE = """
import sys
BLOCKED = {blocked!r}
class Bare:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Bare())
sys.argv[0] = "vgpu-bridge"
from vgpu_bridge.cli import main
from vgpu_bridge.status.command import kubectl_main
run = kubectl_main if sys.argv[1] == "kubectl-vgpu" else main
raise SystemExit(run(sys.argv[2:]))
"""


def bare(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`program args` in a fresh interpreter where the extras' modules cannot be imported."""
    code = BARE.format(blocked=extras_only_modules())
    return subprocess.run(
        [sys.executable, "-c", code, program, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )


def test_the_extras_are_what_a_bare_install_lacks() -> None:
    blocked = extras_only_modules()
    for module in ("structlog", "cryptography", "grpc", "google.protobuf", "pynvml"):
        assert module in blocked
    assert "kubernetes" not in blocked
    assert "yaml" not in blocked


def test_a_bare_install_translates() -> None:
    example = REPO / "examples" / "plain" / "pod-share.yaml"
    done = bare("vgpu-bridge", "translate", "-f", str(example))
    assert done.returncode == 0, done.stderr
    assert "ResourceClaimTemplate" in done.stdout


@pytest.mark.parametrize(
    "command", [["vgpu-bridge", "status", "--help"], ["kubectl-vgpu", "status", "--help"]]
)
def test_a_bare_install_runs_the_viewer(command: list[str]) -> None:
    done = bare(*command)
    assert done.returncode == 0, done.stderr
    assert "--namespace" in done.stdout or "-n" in done.stdout


def test_a_bare_install_lists_every_command_and_the_extras_the_roles_need() -> None:
    done = bare("vgpu-bridge", "--help")
    assert done.returncode == 0, done.stderr
    listed = " ".join(done.stdout.split())
    assert "(needs the [webhook] extra)" in listed
    assert "(needs the [node] extra)" in listed
    assert "translate" in listed


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["webhook"], "webhook"),
        (["webhook", "--help"], "webhook"),
        (["node", "--help"], "node"),
        (["node", "install-libvgpu", "--help"], "node"),
    ],
)
def test_a_role_command_without_its_extra_names_it(args: list[str], extra: str) -> None:
    done = bare("vgpu-bridge", *args)
    assert done.returncode == 2
    assert f"needs the [{extra}] extra" in done.stderr
    assert f"pip install 'vgpu-bridge[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr
