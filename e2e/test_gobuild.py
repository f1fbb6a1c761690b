"""The control plane's, Volcano's and helm's Go builds: each runs ``go build`` once with its own
flags, environment, module and output path, records a stamp, is reused while the stamp matches,
prints its ``make`` line, and fails with its own error. A recording ``go`` stands in for Go."""

from __future__ import annotations

import json
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from e2e.chart import helmbin
from e2e.cluster import build as cluster_build
from e2e.cluster.settings import GOTOOLS_DIR, Settings
from e2e.gobuild import BuildResult, read_stamp, sources_digest
from e2e.volcano import build as volcano_build

Json = dict[str, object]
Built = TypeVar("Built", bound=BuildResult)
#: what the recording go writes down of its environment (None where unset)
GO_VARIABLES = (
    "GOMODCACHE",
    "GOCACHE",
    "GOPATH",
    "GOTOOLCHAIN",
    "CGO_ENABLED",
    "GOFLAGS",
    "GOWORK",
)
RECORDING_GO = """\
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_GO_LOG"], "a") as log:
    env = {name: os.environ.get(name) for name in %(names)r}
    log.write(json.dumps({"args": args, "cwd": os.getcwd(), "env": env}) + "\\n")
if os.environ.get("FAKE_GO_FAIL"):
    sys.exit("go: the fake build failed as asked")
with open(args[args.index("-o") + 1], "w") as out:
    out.write("a binary")
"""


@pytest.fixture
def go_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``go`` on PATH that records each call (arguments, directory, Go variables) in the log
    returned, then writes its ``-o`` file (or fails when FAKE_GO_FAIL is set)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(f"#!{sys.executable}\n" + RECORDING_GO % {"names": GO_VARIABLES})
    go.chmod(go.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "go-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_GO_LOG", str(log))
    for name in GO_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return log


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"VGPU_BRIDGE_CACHE": str(tmp_path / "cache")})


def go_calls(log: Path) -> list[Json]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def expected_env(settings: Settings, **more: str) -> dict[str, str | None]:
    env: dict[str, str | None] = dict.fromkeys(GO_VARIABLES)
    return {**env, **settings.go_env, **more}


def built_then_reused(build: Callable[[], Built]) -> tuple[Built, Built]:
    first, second = build(), build()
    assert (first.reused, second.reused) == (False, True)
    assert first.binary == second.binary
    assert second.build_seconds == round(first.build_seconds, 1)
    return first, second


def assert_lines(target: str, first: str, second: str, binary: Path, about: str) -> None:
    assert re.fullmatch(rf"{target}: built {re.escape(f'{binary} ({about})')} in \d+\.\ds", first)
    reused = rf"{target}: warm, reused {re.escape(f'{binary} ({about})')} in \d+\.\d\ds"
    assert re.fullmatch(rf"{reused} \(its go build took \d+s\)", second)


def test_the_control_plane_binary_is_built_once_with_its_flags_and_go_caches(
    go_log: Path, settings: Settings
) -> None:
    first, second = built_then_reused(lambda: cluster_build.ensure_binary(settings))
    major, minor = settings.minor.split(".")
    version = "k8s.io/component-base/version"
    ldflags = (
        f"-s -w -X {version}.gitVersion={settings.k8s_version} "
        f"-X {version}.gitMajor={major} -X {version}.gitMinor={minor}"
    )
    partial = settings.bin_dir / "vgpu-k8s.partial"
    (call,) = go_calls(go_log)
    assert call["args"] == ["build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), "."]
    assert (call["cwd"], call["env"]) == (str(GOTOOLS_DIR), expected_env(settings))
    assert first.binary == settings.binary == settings.bin_dir / "vgpu-k8s"
    stamp = json.loads((settings.bin_dir / "vgpu-k8s.stamp").read_text())
    assert stamp["digest"] == sources_digest(GOTOOLS_DIR, ("go.mod", "go.sum", "main.go"))
    lines = cluster_build.report(first), cluster_build.report(second)
    assert_lines("cluster-bin", *lines, settings.binary, "0 MiB")


def test_the_volcano_binary_is_built_once_in_its_workspace_with_the_go_caches(
    go_log: Path, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = volcano_build.VolcanoBuild.from_env(settings)
    workspace = tmp_path / "go.work"  # made from the module cache by _workspace; not here
    monkeypatch.setattr(volcano_build, "_workspace", lambda _: workspace)
    first, second = built_then_reused(lambda: volcano_build.ensure_binary(build))
    ldflags = f"-s -w -X volcano.sh/volcano/pkg/version.Version={build.version}"
    partial = build.bin_dir / "vgpu-volcano.partial"
    (call,) = go_calls(go_log)
    assert call["args"] == ["build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), "."]
    assert call["cwd"] == str(volcano_build.GOTOOLS_DIR)
    assert call["env"] == expected_env(settings, GOWORK=str(workspace))
    assert first.binary == settings.cache_root / f"volcano-{build.version}/bin/vgpu-volcano"
    assert (build.bin_dir / "vgpu-volcano.stamp").is_file()
    lines = volcano_build.report(first), volcano_build.report(second)
    assert_lines("volcano-bin", *lines, build.binary, "0 MiB")


def test_helm_is_built_once_from_its_package_with_the_go_caches(
    go_log: Path, settings: Settings
) -> None:
    first, second = built_then_reused(lambda: helmbin.ensure_helm(settings))
    version = helmbin.helm_version()
    bin_dir = settings.cache_root / f"helm-{version}" / "bin"
    ldflags = f"-s -w -X helm.sh/helm/v4/internal/version.version={version}"
    command = ["build", "-trimpath", "-ldflags", ldflags, "-o", str(bin_dir / "helm.partial")]
    (call,) = go_calls(go_log)
    assert call["args"] == [*command, "helm.sh/helm/v4/cmd/helm"]
    assert (call["cwd"], call["env"]) == (str(helmbin.HELMTOOL_DIR), expected_env(settings))
    assert first.binary == bin_dir / "helm"
    assert (bin_dir / "helm.stamp").is_file()
    lines = helmbin.report(first), helmbin.report(second)
    assert_lines("helm-bin", *lines, first.binary, f"{version}, 0 MiB")


def test_a_stamp_of_other_sources_or_a_missing_binary_means_building_again(
    go_log: Path, settings: Settings
) -> None:
    first = helmbin.ensure_helm(settings)
    stamp = first.binary.with_name("helm.stamp")
    stamp.write_text(json.dumps({"digest": "other sources", "build_seconds": 1.0}))
    assert not helmbin.ensure_helm(settings).reused
    first.binary.unlink()
    assert not helmbin.ensure_helm(settings).reused
    assert len(go_calls(go_log)) == 3
    assert helmbin.ensure_helm(settings).reused


@pytest.mark.parametrize("stamp", ["", "not json", "[1, 2]", '"a string"'])
def test_a_stamp_that_is_not_a_json_object_reads_as_nothing_recorded(
    tmp_path: Path, stamp: str
) -> None:
    path = tmp_path / "tool.stamp"
    path.write_text(stamp)
    assert read_stamp(path) == {}
    assert read_stamp(tmp_path / "missing.stamp") == {}


def build_volcano(settings: Settings) -> object:
    build = volcano_build.VolcanoBuild.from_env(settings)
    return volcano_build.ensure_binary(build)


@pytest.mark.parametrize(
    ("build", "error", "binary"),
    [
        (cluster_build.ensure_binary, cluster_build.BuildError, "k8s-*/bin/vgpu-k8s"),
        (build_volcano, cluster_build.BuildError, "volcano-*/bin/vgpu-volcano"),
        (helmbin.ensure_helm, helmbin.HelmBuildError, "helm-*/bin/helm"),
    ],
    ids=["control-plane", "volcano", "helm"],
)
def test_a_failed_go_build_raises_the_builds_error_and_leaves_no_binary_or_stamp(
    go_log: Path,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    build: Callable[[Settings], object],
    error: type[Exception],
    binary: str,
) -> None:
    monkeypatch.setattr(volcano_build, "_workspace", lambda _: settings.cache_root / "go.work")
    monkeypatch.setenv("FAKE_GO_FAIL", "1")
    with pytest.raises(error, match=r"go build -trimpath .* failed:\n.*the fake build failed"):
        build(settings)
    assert list(settings.cache_root.glob(binary)) == []
    assert list(settings.cache_root.glob(binary + ".stamp")) == []
