"""`make kubectl-plugin`: the kubectl plugin as one file, for krew (plugins/krew/vgpu-bridge.yaml).

Writes `dist/kubectl-vgpu_bridge`, a zipapp (`python -m zipapp` format) of exactly the modules of
ours that `kubectl vgpu status` imports, with the package's metadata (so `--version` reads it),
and `dist/kubectl-vgpu_bridge-v<version>.tar.gz` (the zipapp and LICENSE), the archive krew
installs, byte for byte the same on every build; then the krew manifest with that archive's
sha256 filled in, `dist/krew/vgpu-bridge.yaml`. The file name is krew's for the plugin
`vgpu-bridge`: kubectl runs `kubectl-vgpu_bridge` for `kubectl vgpu-bridge`.

The zipapp bundles none of the third-party packages the bare install depends on (the Kubernetes
client, PyYAML, tenacity, prometheus-client): the Python 3.11+ that runs it must have them, as
the manifest's caveats say.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import importlib.metadata
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import zipapp
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "plugins" / "krew" / "vgpu-bridge.yaml"
NAME = "kubectl-vgpu_bridge"
ENTRY = "vgpu_bridge.status.command"
#: the zipapp's entry: a Python without the bare install's dependencies is told, in one line,
#: what to install, instead of an import traceback
MAIN = """import importlib.util
import sys

if sys.version_info < (3, 11):
    sys.exit(f"kubectl vgpu-bridge: needs Python 3.11 or newer, {{sys.executable}} is "
             f"{{sys.version.split()[0]}}")
NEEDS = {needs!r}
missing = [module for module in NEEDS if importlib.util.find_spec(module) is None]
if missing:
    wanted = " ".join(repr(NEEDS[module]) for module in missing)
    sys.exit(f"kubectl vgpu-bridge: this Python lacks {{', '.join(missing)}}: "
             f"{{sys.executable}} -m pip install {{wanted}}")
from {entry} import kubectl_main

raise SystemExit(kubectl_main())
"""
#: lists, in a fresh interpreter, the modules of ours the plugin imports (the status command's
#: own imports are all at module level; `kube` imports only third-party packages lazily)
LIST_MODULES = f"""
import sys, {ENTRY}
for name, module in sorted(sys.modules.items()):
    if name == "vgpu_bridge" or name.startswith("vgpu_bridge."):
        print(module.__file__)
"""


def plugin_modules() -> list[Path]:
    """The source files of every module of ours the plugin loads, relative to the repository."""
    done = subprocess.run(
        [sys.executable, "-c", LIST_MODULES],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    files = [Path(line).resolve() for line in done.stdout.split()]
    package = REPO / "vgpu_bridge"
    outside = [str(file) for file in files if not file.is_relative_to(package)]
    if outside:
        raise SystemExit(f"modules loaded from outside {package}: {', '.join(outside)}")
    return [file.relative_to(REPO) for file in files]


def plugin_requirements(modules: list[Path]) -> dict[str, str]:
    """What of the bare install the plugin's `modules` import (at any depth of their code: the
    client is imported lazily), each with the requirement that brings it; `translate`'s own
    (ruamel.yaml) is not among them."""
    imported = set()
    for module in modules:
        for node in ast.walk(ast.parse((REPO / module).read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    return {m: r for m, r in bare_requirements().items() if m.split(".")[0] in imported}


def bare_requirements() -> dict[str, str]:
    """Each module the bare install's dependencies bring (pyproject.toml's `dependencies`, no
    extra), and the requirement that brings it."""
    requires = importlib.metadata.requires("vgpu-bridge") or []
    owners = importlib.metadata.packages_distributions()
    needs = {}
    for requirement in (r for r in requires if "extra ==" not in r):
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
        for module, distributions in owners.items():
            if not module.startswith("_") and any(
                _canonical(d) == _canonical(name) for d in distributions
            ):
                needs[module] = requirement.split(";")[0].strip()
    return dict(sorted(needs.items()))


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def metadata(version: str) -> str:
    return f"Metadata-Version: 2.1\nName: vgpu-bridge\nVersion: {version}\n"


def build_zipapp(target: Path, version: str) -> list[Path]:
    """The zipapp at `target`; returns the modules it holds."""
    modules = plugin_modules()
    with tempfile.TemporaryDirectory() as staging:
        root = Path(staging)
        for module in modules:
            (root / module).parent.mkdir(parents=True, exist_ok=True)
            (root / module).write_bytes((REPO / module).read_bytes())
        info = root / f"vgpu_bridge-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(metadata(version))
        needs = plugin_requirements(modules)
        (root / "__main__.py").write_text(MAIN.format(needs=needs, entry=ENTRY))
        zipapp.create_archive(root, target, interpreter="/usr/bin/env python3", compressed=True)
    _reproducible_zip(target)
    return modules


def _reproducible_zip(target: Path) -> None:
    """Rewrite the zipapp with its entries sorted and dated 1980-01-01 (zipapp takes each
    file's mtime), so two builds of one tree are the same bytes."""
    import zipfile

    data = target.read_bytes()
    shebang, _, _ = data.partition(b"PK\x03\x04")
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        entries = sorted((info.filename, source.read(info)) for info in source.infolist())
    out = io.BytesIO()
    out.write(shebang)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, content)
    target.write_bytes(out.getvalue())
    target.chmod(0o755)


def build_archive(zipped: Path, target: Path) -> None:
    """`target` (.tar.gz): the zipapp (mode 0755) and LICENSE, owned by 0:0, dated 0."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, mode in ((zipped, 0o755), (REPO / "LICENSE", 0o644)):
            info = tarfile.TarInfo(path.name)
            content = path.read_bytes()
            info.size, info.mode, info.mtime = len(content), mode, 0
            tar.addfile(info, io.BytesIO(content))
    with target.open("wb") as file, gzip.GzipFile(fileobj=file, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())


_TAG = re.compile(r"\{\{ *\.TagName *\}\}")
_URI_AND_SHA = re.compile(r'^( *)\{\{ *addURIAndSha +"([^"]+)" +\.TagName *\}\}$', re.MULTILINE)


def render_manifest(template: str, *, tag: str, sha256: str) -> str:
    """The krew-release-bot template with `{{ .TagName }}` and `addURIAndSha "URL" .TagName`
    filled in, for an archive whose sha256 is known here."""

    def uri_and_sha(match: re.Match[str]) -> str:
        indent, url = match.group(1), _TAG.sub(tag, match.group(2))
        return f"{indent}uri: {url}\n{indent}sha256: {sha256}"

    if not _URI_AND_SHA.search(template):
        raise SystemExit(f"{MANIFEST}: no addURIAndSha line to fill in")
    return _TAG.sub(tag, _URI_AND_SHA.sub(uri_and_sha, template))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where to write")
    args = parser.parse_args(argv)
    version = importlib.metadata.version("vgpu-bridge")
    args.out.mkdir(parents=True, exist_ok=True)
    zipped = args.out / NAME
    modules = build_zipapp(zipped, version)
    archive = args.out / f"{NAME}-v{version}.tar.gz"
    build_archive(zipped, archive)
    manifest = args.out / "krew" / MANIFEST.name
    manifest.parent.mkdir(exist_ok=True)
    sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
    manifest.write_text(render_manifest(MANIFEST.read_text(), tag=f"v{version}", sha256=sha256))
    print(f"{zipped} ({len(modules)} modules of ours)")
    print(archive)
    print(manifest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
