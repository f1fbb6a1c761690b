"""Kubernetes manifests as text: multi-document YAML or JSON in, objects out, and back."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class ManifestError(ValueError):
    """The text is not a stream of Kubernetes objects; `lines` say where and why."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("; ".join(lines))


def _documents(text: str, source: str) -> list[Any]:
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "document"
        raise ManifestError([f"{source}: {where}: malformed YAML: {exc.problem}"]) from None
    except yaml.YAMLError as exc:
        raise ManifestError([f"{source}: document: malformed YAML: {exc}"]) from None


def _is_list(doc: dict[str, Any]) -> bool:
    kind = doc.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list)


def load_objects(text: str, *, source: str) -> list[dict[str, Any]]:
    """Every object in `text` (JSON is YAML too); `List` kinds are expanded into their items.

    Each object must be a map with `apiVersion` and `kind`; all problems are reported together.
    """
    objects: list[dict[str, Any]] = []
    problems: list[str] = []
    for number, doc in enumerate(_documents(text, source), start=1):
        items = doc["items"] if isinstance(doc, dict) and _is_list(doc) else [doc]
        for index, item in enumerate(items):
            where = f"{source}: document {number}" + (f" item {index}" if item is not doc else "")
            if not isinstance(item, dict):
                problems.append(f"{where}: (root): must be an object, got {type(item).__name__}")
                continue
            missing = [k for k in ("apiVersion", "kind") if not isinstance(item.get(k), str)]
            problems += [f"{where}: {key}: required" for key in missing]
            if not missing:
                objects.append(item)
    if problems:
        raise ManifestError(problems)
    return objects


def dump_objects(objects: Iterable[dict[str, Any]], *, output: str) -> str:
    """Multi-document YAML, or one JSON `List`."""
    items = list(objects)
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2) + "\n"
    return yaml.dump_all(
        items, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096
    )
