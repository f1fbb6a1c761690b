"""``python -m e2e.kai build --source DIR`` on small trees shaped like KAI's: what it refuses, how
it reads PR #2102 from the allocator file, and a real ``go build`` of the tree's two commands into
a private cache, reused while the tree is unchanged and named by ``kai-current.json`` (which
``KaiBuild.from_env`` then runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from e2e.cluster.settings import Settings
from e2e.kai.__main__ import main
from e2e.kai.build import CURRENT, KaiSource, KaiSourceError, includes_pr2102
from e2e.kai.real_kai import KaiBuild

WITHOUT_FIX = """package dynamicresources
func allocate() {
	allocator, err := structured.NewAllocator(
		context.Background(), structured.Features{},
		*allocatedState,
	)
}
"""
WITH_FIX = WITHOUT_FIX.replace("structured.Features{},", "allocatorFeatures(),")


def kai_tree(root: Path, *, allocator: str = WITH_FIX, module: str = "") -> Path:
    module = module or "github.com/kai-scheduler/KAI-scheduler"
    (root / "go.mod").parent.mkdir(parents=True, exist_ok=True)
    (root / "go.mod").write_text(f"module {module}\n\ngo 1.22\n")
    for command in ("scheduler", "binder"):
        (root / "cmd" / command).mkdir(parents=True)
        (root / "cmd" / command / "main.go").write_text(
            f'package main\n\nimport "fmt"\n\nfunc main() {{ fmt.Println("{command}") }}\n'
        )
    crds = root / "deployments" / "kai-scheduler" / "crds"
    crds.mkdir(parents=True)
    (crds / "scheduling.run.ai_queues.yaml").write_text("kind: CustomResourceDefinition\n")
    plugin = root / "pkg" / "scheduler" / "plugins" / "dynamicresources"
    plugin.mkdir(parents=True)
    # not Go the build compiles (no package of cmd/ imports it): the file is only read
    (plugin / "dynamicresources.go").write_text(allocator)
    return root


def test_pr2102_is_read_from_the_allocator_file() -> None:
    assert not includes_pr2102(WITHOUT_FIX)
    assert includes_pr2102(WITH_FIX)
    assert not includes_pr2102("package dynamicresources\n")  # no allocator at all


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda root: (root / "go.mod").unlink(), "no go.mod"),
        (lambda root: (root / "go.mod").write_text("module example.com/other\n"), "not KAI's"),
        (lambda root: shutil.rmtree(root / "cmd" / "binder"), "missing cmd/binder"),
    ],
)
def test_a_tree_that_is_not_kai_is_refused_with_the_reason(
    tmp_path: Path, change: object, error: str
) -> None:
    root = kai_tree(tmp_path / "kai")
    change(root)  # type: ignore[operator]
    with pytest.raises(KaiSourceError, match=error):
        KaiSource.read(root)


def test_the_digest_follows_the_files(tmp_path: Path) -> None:
    root = kai_tree(tmp_path / "kai")
    first = KaiSource.read(root)
    assert first.version == f"source-{first.digest[:12]}"  # a tarball: no git describe
    assert KaiSource.read(root, version="v0.18.0").digest == first.digest
    (root / "cmd" / "binder" / "main.go").write_text("package main\n\nfunc main() {}\n")
    assert KaiSource.read(root).digest != first.digest


def test_build_then_reuse_then_run_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("VGPU_BRIDGE_CACHE", str(cache))
    for name in ("KAI_BIN_DIR", "KAI_CRD_DIR", "KAI_VERSION"):
        monkeypatch.delenv(name, raising=False)
    assert KaiBuild.from_env() is None
    root = kai_tree(tmp_path / "kai", allocator=WITHOUT_FIX)

    assert main(["build", "--source", str(root), "--version", "v0.17.0+local"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("kai-bin: built KAI v0.17.0+local"), out
    assert "WITHOUT PR #2102" in out
    assert "places none of our shares" in err

    record = json.loads((cache / CURRENT).read_text())
    assert record["has_pr2102"] is False
    assert record["version"] == "v0.17.0+local"
    build = KaiBuild.from_env()
    assert build is not None
    assert not build.has_consumable_capacity
    assert build.version == "v0.17.0+local"
    assert (build.crd_dir / "scheduling.run.ai_queues.yaml").is_file()
    assert build.scheduler.read_bytes() != build.binder.read_bytes()  # two programs

    assert main(["build", "--source", str(root), "--version", "v0.17.0+local"]) == 0
    assert capsys.readouterr().out.startswith("kai-bin: reused"), "unchanged tree: no build"

    fixed = kai_tree(tmp_path / "kai-fixed")
    assert main(["build", "--source", str(fixed)]) == 0
    assert "built" in capsys.readouterr().out
    build = KaiBuild.from_env()
    assert build is not None
    assert build.has_consumable_capacity
    assert str(Settings.from_env().cache_root) in str(build.scheduler)


def test_a_build_failure_is_reported_and_names_no_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VGPU_BRIDGE_CACHE", str(tmp_path / "cache"))
    root = kai_tree(tmp_path / "kai")
    (root / "cmd" / "scheduler" / "main.go").write_text("package main\n\nfunc main() { x }\n")
    assert main(["build", "--source", str(root)]) == 1
    assert "go build" in capsys.readouterr().err
    assert not (tmp_path / "cache" / CURRENT).exists()
