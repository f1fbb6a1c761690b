"""The chart's README lists every value of values.yaml with its default and description, and is
what scripts/chart_readme.py makes of the committed values (a stale one fails, naming the
command that regenerates it)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "chart_readme.py"
CHART = ROOT / "charts" / "vgpu-bridge"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_readme", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


readme = _script()


def test_committed_chart_readme_is_not_stale() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_stale_readme_is_reported_with_the_command_that_fixes_it(tmp_path: Path) -> None:
    text = readme.generate()
    path = tmp_path / "README.md"
    assert "python scripts/chart_readme.py" in readme.stale(path, text)  # missing
    path.write_text(text.replace("`true`", "`false`", 1))
    assert "python scripts/chart_readme.py" in readme.stale(path, text)  # edited
    path.write_text(text)
    assert readme.stale(path, text) == ""


def _leaves(values: dict[str, Any], schema: dict[str, Any], path: str = "") -> list[str]:
    """Every value the README must list: keys of mappings the schema describes key by key."""
    found = []
    for key, value in values.items():
        dotted, node = f"{path}{key}", (schema.get("properties") or {}).get(key, {})
        if isinstance(value, dict) and value and "properties" in node:
            found += _leaves(value, node, f"{dotted}.")
        else:
            found.append(dotted)
    return found


def test_every_value_of_the_chart_has_a_row_with_its_default() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    rows = {
        line.split(" | ")[0].removeprefix("| `").removesuffix("`"): line
        for line in (CHART / "README.md").read_text().splitlines()
        if line.startswith("| `")
    }
    leaves = _leaves(values, schema)
    assert len(leaves) > 100
    for path in leaves:
        default = values
        for key in path.split("."):
            default = default[key]
        assert path in rows, path
        _, default_cell, description = rows[path].split(" | ", 2)
        assert default_cell == f"`{json.dumps(default)}`", path
        assert description.removesuffix(" |").strip(), path


SCHEMA = {
    "properties": {
        "a": {"properties": {"x": {"description": "from the schema"}, "y": {}}},
        "free": {"type": "object", "description": "free-form"},
    }
}


def test_descriptions_come_from_the_comments_above_and_after_a_key() -> None:
    text = """# not about a: a blank line follows

# a group
a:
  # first line
  # second line
  x: 1   # after it
  y: "#no comment" # but this
free:
  k: v
"""
    rows = readme.rows(text, SCHEMA)
    assert [(r.path, r.default, r.description) for r in rows] == [
        ("a", "", "a group"),
        ("a.x", "1", "first line second line after it"),
        ("a.y", '"#no comment"', "but this"),
        ("free", '{"k": "v"}', "free-form"),  # the schema lists no keys: one value
    ]


def test_a_value_without_a_comment_takes_the_schemas_description() -> None:
    rows = readme.rows("a:\n  x: 1\n  y: 2 # y\nfree: {}\n", SCHEMA)
    assert [(r.path, r.description) for r in rows] == [
        ("a.x", "from the schema"),
        ("a.y", "y"),
        ("free", "free-form"),
    ]  # an undescribed group gets no row of its own


def test_a_value_with_no_description_anywhere_is_an_error_naming_it() -> None:
    with pytest.raises(readme.UndocumentedValue, match=r"^a\.y: no description"):
        readme.rows("a:\n  x: 1\n  y: 2\n", SCHEMA)


def test_cells_escape_pipes_and_angle_brackets_outside_code() -> None:
    cell = readme._cell("a <release> | b `<kept> x`")
    assert cell == "a &lt;release&gt; \\| b `<kept> x`"
