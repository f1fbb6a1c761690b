"""Generate the chart's README (charts/vgpu-bridge/README.md) from its values.yaml.

    python scripts/chart_readme.py          # (re)write the README
    python scripts/chart_readme.py --check  # exit 1 when the committed README is stale

Every value gets a row: its dotted path, its default (as JSON) and its description: the comment
lines right above the key (no blank line between) and the comment after it on its line; a value
without such a comment takes its description from values.schema.json; a value with neither is an
error naming it. A mapping whose keys the schema lists is a group: a row of its own (when
described), then its children; free-form mappings (resources, affinity) and lists are values.
Nothing here is edited by hand.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "vgpu-bridge"
README = CHART / "README.md"
COMMAND = "python scripts/chart_readme.py"


class UndocumentedValue(ValueError):
    """A value has neither a comment in values.yaml nor a description in the schema."""


@dataclass(frozen=True)
class Row:
    path: str
    default: str  # JSON; "" for a group
    description: str


def rows(values_text: str, schema: dict[str, Any]) -> list[Row]:
    """One row per value (and per described group), in the file's order."""
    lines = values_text.splitlines()
    root = yaml.compose(values_text)
    if not isinstance(root, yaml.MappingNode):
        raise UndocumentedValue("values.yaml is not a mapping")
    defaults = yaml.safe_load(values_text)
    found: list[Row] = []
    _walk(root, (), lines=lines, defaults=defaults, schema=schema, found=found)
    return found


def _walk(
    node: yaml.MappingNode,
    path: tuple[str, ...],
    *,
    lines: list[str],
    defaults: dict[str, Any],
    schema: dict[str, Any],
    found: list[Row],
) -> None:
    for key_node, value_node in node.value:
        key_path = (*path, str(key_node.value))
        line = key_node.start_mark.line
        text = _comment_above(lines, line) + _inline_comment(lines[line])
        described = " ".join(text) or _schema_description(schema, key_path)
        dotted = ".".join(key_path)
        if _is_group(value_node, _schema_node(schema, key_path)):
            if described:
                found.append(Row(dotted, "", described))
            _walk(value_node, key_path, lines=lines, defaults=defaults, schema=schema, found=found)
            continue
        if not described:
            raise UndocumentedValue(
                f"{dotted}: no description (a comment above it or after it in values.yaml, "
                "or a description in values.schema.json)"
            )
        found.append(Row(dotted, json.dumps(_get(defaults, key_path)), described))


def _is_group(node: yaml.Node, schema: dict[str, Any] | None) -> bool:
    """A mapping whose keys the schema names, or a block mapping the schema does not know: its
    children get rows. A free-form one (resources, affinity...) is one value."""
    if not isinstance(node, yaml.MappingNode) or not node.value:
        return False
    return "properties" in schema if schema is not None else not node.flow_style


def _comment_above(lines: list[str], line: int) -> list[str]:
    block: list[str] = []
    for text in reversed(lines[:line]):
        stripped = text.strip()
        if not stripped.startswith("#"):
            break
        block.insert(0, stripped.lstrip("#").strip())
    return [part for part in block if part]


def _inline_comment(text: str) -> list[str]:
    """The comment after a value on its line (a `#` after a blank, outside quotes)."""
    quote = ""
    for index, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and index > 0 and text[index - 1] in " \t":
            comment = text[index + 1 :].strip()
            return [comment] if comment else []
    return []


def _schema_node(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: Any = schema
    for key in path:
        node = (node.get("properties") or {}).get(key)
        if not isinstance(node, dict):
            return None
    found: dict[str, Any] = node
    return found


def _schema_description(schema: dict[str, Any], path: tuple[str, ...]) -> str:
    description = (_schema_node(schema, path) or {}).get("description", "")
    return description if isinstance(description, str) else ""


def _get(defaults: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = defaults
    for key in path:
        value = value[key]
    return value


def render(chart_yaml: dict[str, Any], found: list[Row]) -> str:
    """The README: what the chart is, how to install it, then every value."""
    name, version = chart_yaml["name"], chart_yaml["version"]
    table = "\n".join(
        f"| `{row.path}` | {_cell(f'`{row.default}`' if row.default else '')} "
        f"| {_cell(row.description)} |"
        for row in found
    )
    return f"""<!-- Generated by `{COMMAND}` from values.yaml; do not edit. -->
# {name} Helm chart

{chart_yaml["description"]}

Chart {version}, app {chart_yaml["appVersion"]}, Kubernetes `{chart_yaml["kubeVersion"]}` (1.34 and
1.35 only with `kubernetes.allowGatedConsumableCapacity`: docs/kubernetes-versions.md).

`make chart` checks this README, lints the chart and packages it as `dist/{name}-{version}.tgz`:

```
kubectl create namespace {name}
kubectl label namespace {name} pod-security.kubernetes.io/enforce=privileged
helm install {name} dist/{name}-{version}.tgz --namespace {name} \\
  --set image.registry=registry.example.com/gpu
```

The node agent is privileged: its namespace must enforce Pod Security `privileged`
(docs/pod-security.md). The webhook's NetworkPolicy is opt-in (docs/networkpolicy.md).
`values.schema.json` checks every value; `templates/validation.yaml` refuses combinations that
cannot work, naming the value to change.

## Values

| Value | Default | Description |
|---|---|---|
{table}
"""


def _cell(text: str) -> str:
    """Text for a table cell: pipes escaped; outside `code` spans, < > & too (Markdown would
    take <release> for an HTML tag and drop it)."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):
        parts[index] = html.escape(parts[index], quote=False)
    return "`".join(parts).replace("|", "\\|")


def generate(chart: Path = CHART) -> str:
    schema = json.loads((chart / "values.schema.json").read_text())
    chart_yaml = yaml.safe_load((chart / "Chart.yaml").read_text())
    return render(chart_yaml, rows((chart / "values.yaml").read_text(), schema))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the README is stale")
    args = parser.parse_args(argv)
    try:
        text = generate()
    except UndocumentedValue as error:
        print(f"{CHART / 'values.yaml'}: {error}", file=sys.stderr)
        return 1
    if not args.check:
        README.write_text(text)
        print(f"wrote {README}")
        return 0
    problem = stale(README, text)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


def stale(readme: Path, text: str) -> str:
    """Why ``readme`` is not ``text`` (with the command that fixes it); "" when it is."""
    if readme.exists() and readme.read_text() == text:
        return ""
    return (
        f"{readme} is stale: values.yaml, values.schema.json or Chart.yaml changed. "
        f"Run `{COMMAND}` and commit the result."
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
