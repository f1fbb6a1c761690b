"""`make kubectl-plugin` (scripts/build_kubectl_plugin.py): the zipapp krew installs runs the
viewer from itself (version from its own metadata, one-line failures under krew's name), its
archive is the same bytes on every build, and the rendered krew manifest names that archive by
its sha256, with the file names krew's rules give the plugin `vgpu-bridge`."""

from __future__ import annotations

import hashlib
import importlib.util
import socket
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from vgpu_bridge import __version__

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_kubectl_plugin.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_kubectl_plugin", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _script()
ARCHIVE = f"kubectl-vgpu_bridge-v{__version__}.tar.gz"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    assert build.main(["--out", str(out)]) == 0
    return out


def plugin(built: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The zipapp run as kubectl runs a plugin, away from the source tree (`cwd`), by this
    interpreter (it has the bare install's dependencies)."""
    return subprocess.run(
        [sys.executable, str(built / "kubectl-vgpu_bridge"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_zipapp_answers_its_version_from_its_own_metadata(built: Path, tmp_path: Path) -> None:
    done = plugin(built, "--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"kubectl vgpu-bridge {__version__}\n")
    with zipfile.ZipFile(built / "kubectl-vgpu_bridge") as archive:
        names = set(archive.namelist())
    assert "vgpu_bridge/status/command.py" in names
    assert not any(name.startswith(("vgpu_bridge/webhook/", "vgpu_bridge/node/")) for name in names)


def test_the_zipapp_fails_in_one_line_under_krews_name(built: Path, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        })
    )  # fmt: skip
    done = plugin(built, "status", "--kubeconfig", str(kubeconfig), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"kubectl vgpu-bridge: cannot reach the API server at http://127.0.0.1:{port}:"
        " connection refused\n"
    )


def test_a_build_is_the_same_bytes_every_time(built: Path, tmp_path: Path) -> None:
    assert build.main(["--out", str(tmp_path)]) == 0
    for name in ("kubectl-vgpu_bridge", ARCHIVE, "krew/vgpu-bridge.yaml"):
        assert (tmp_path / name).read_bytes() == (built / name).read_bytes(), name


def test_the_manifest_installs_the_archive_it_names(built: Path) -> None:
    manifest: dict[str, Any] = yaml.safe_load((built / "krew" / "vgpu-bridge.yaml").read_text())
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == "vgpu-bridge"
    spec = manifest["spec"]
    assert spec["version"] == f"v{__version__}"
    (platform,) = spec["platforms"]
    assert platform["uri"].endswith(f"/v{__version__}/{ARCHIVE}")
    archive = built / ARCHIVE
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    # kubectl runs `kubectl-vgpu_bridge` for `kubectl vgpu-bridge`: krew's bin for the name
    assert platform["bin"] == "kubectl-" + manifest["metadata"]["name"].replace("-", "_")
    with tarfile.open(archive) as tar:
        members = {member.name: member for member in tar.getmembers()}
    assert {f["from"] for f in platform["files"]} == set(members)
    assert members[platform["bin"]].mode == 0o755


def test_the_manifest_caveats_name_every_dependency_the_zipapp_checks(built: Path) -> None:
    caveats = yaml.safe_load((built / "krew" / "vgpu-bridge.yaml").read_text())["spec"]["caveats"]
    needs = build.plugin_requirements(build.plugin_modules())
    assert set(needs) == {"kubernetes", "yaml", "tenacity", "prometheus_client"}
    for requirement in needs.values():
        assert f"'{requirement}'" in caveats


def test_a_template_without_the_archive_line_is_refused() -> None:
    with pytest.raises(SystemExit, match="no addURIAndSha line"):
        build.render_manifest("spec:\n  version: {{ .TagName }}\n", tag="v1", sha256="0")
