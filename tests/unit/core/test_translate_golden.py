"""Golden cases: tests/data/translate/<case>/in.yaml → out.yaml (stdout), stderr.txt, exit code.

`args` holds extra flags (`{data}` = tests/data). Regenerate after a deliberate change with
`UPDATE_GOLDEN=1 make unit`, then read the diff: the goldens are the specification.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli_runner import DATA, run_cli

CASES = sorted(p for p in (DATA / "translate").iterdir() if p.is_dir())
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def _expect(path: Path, actual: str) -> None:
    if UPDATE:
        if actual:
            path.write_text(actual)
        elif path.exists():
            path.unlink()
        return
    expected = path.read_text() if path.exists() else ""
    assert actual == expected, f"{path} differs"


def _args(case: Path) -> str:
    extra = (case / "args").read_text().strip() if (case / "args").exists() else ""
    return f"translate -f - {extra}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_translate_golden(case: Path) -> None:
    result = run_cli(_args(case), stdin=(case / "in.yaml").read_text())
    _expect(case / "out.yaml", result.stdout)
    _expect(case / "stderr.txt", result.stderr)
    _expect(case / "exit", "" if result.code == 0 else f"{result.code}\n")
    if case.name.startswith("bad-"):
        assert result.code == 1, "bad input must exit 1"
        assert result.stdout == "", "bad input must print nothing to stdout"
        assert "Traceback" not in result.stderr
    else:
        assert result.code == 0, result.stderr


@pytest.mark.parametrize(
    "case", [c for c in CASES if not c.name.startswith("bad-")], ids=lambda c: c.name
)
def test_translated_output_translates_to_itself(case: Path) -> None:
    first = run_cli(_args(case), stdin=(case / "in.yaml").read_text())
    again = run_cli(_args(case), stdin=first.stdout)
    assert again.code == 0, again.stderr
    assert again.stdout == first.stdout
