"""Where `make test` reads HAMi's examples from (e2e/upstream_examples.py), with real git clones."""

from __future__ import annotations

import subprocess
from pathlib import Path

from e2e.upstream_examples import BESIDE, VARIABLE, hami_examples, origin_checkout


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _checkout(root: Path) -> Path:
    """`root`/main, a git repository with one commit, and `root`/shared/... holding the examples."""
    main = root / "main"
    main.mkdir(parents=True)
    _git("init", "-q", cwd=main)
    (main / "README.md").write_text("x\n")
    _git("add", "README.md", cwd=main)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x", cwd=main)
    (root / BESIDE).mkdir(parents=True)
    return main


def test_the_variable_wins(tmp_path: Path) -> None:
    main = _checkout(tmp_path / "work")
    assert hami_examples({VARIABLE: "/elsewhere"}, main) == Path("/elsewhere")


def test_the_reference_dir_beside_the_repository(tmp_path: Path) -> None:
    main = _checkout(tmp_path / "work")
    assert hami_examples({}, main) == tmp_path / "work" / BESIDE


def test_a_clone_elsewhere_reads_the_examples_beside_its_origin(tmp_path: Path) -> None:
    main = _checkout(tmp_path / "work")
    _git("clone", "-q", ".", str(tmp_path / "x"), cwd=main)  # as `git clone . /tmp/x`
    assert origin_checkout(tmp_path / "x") == main
    assert hami_examples({}, tmp_path / "x") == tmp_path / "work" / BESIDE


def test_nothing_found_names_the_place_beside_the_repository(tmp_path: Path) -> None:
    lone = tmp_path / "lone"
    lone.mkdir()
    _git("init", "-q", cwd=lone)
    assert origin_checkout(lone) is None
    assert hami_examples({}, lone) == tmp_path / BESIDE
