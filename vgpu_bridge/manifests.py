"""Kubernetes manifests as text: multi-document YAML or JSON in, objects out, and back.

Before a document is built, its event stream is read once to bound it: maps and lists may nest at
most `MAX_DEPTH` levels (aliases count as the nodes they stand for), and aliases may stand for at
most `MAX_ALIAS_NODES` nodes in all. A deep document would otherwise exhaust the recursion of the
YAML/JSON writers, and a few kilobytes of nested aliases ("billion laughs") expand to gigabytes
when written as JSON. A map that holds a key twice is refused with both lines: YAML says keys are
unique, and PyYAML would silently keep the last value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from vgpu_bridge.core.errors import SHOWN_CHARS
from vgpu_bridge.core.shapes import MAX_DEPTH

try:
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # PyYAML built without libyaml: the pure-Python reader, slower
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *base`, which may be overridden key by key
MAX_ALIAS_NODES = 1_000_000  # what aliases may add beyond the nodes written out
__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "Document",
    "ManifestError",
    "dump_objects",
    "load_documents",
    "load_objects",
]


class ManifestError(ValueError):
    """The text is not a stream of Kubernetes objects; `lines` say where and why."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("; ".join(lines))


@dataclass(slots=True)
class _Open:
    """A map or list whose end has not been read yet."""

    anchor: str | None
    size: int = 1
    height: int = 1


@dataclass(slots=True)
class _Bounds:
    """What one stream of YAML events holds so far: open collections, anchors, alias nodes."""

    source: str
    open: list[_Open]
    anchors: dict[str, tuple[int, int]]
    alias_nodes: int = 0

    def node(self, size: int, height: int, anchor: str | None) -> None:
        """A finished node (scalar, alias or collection) of `size` nodes, `height` levels deep."""
        if anchor:
            self.anchors[anchor] = (size, height)
        if self.open:
            parent = self.open[-1]
            parent.size += size
            parent.height = max(parent.height, height + 1)

    def alias(self, anchor: str) -> None:
        size, height = self.anchors.get(anchor, (1, 0))
        self.alias_nodes += size
        if self.alias_nodes > MAX_ALIAS_NODES:
            self.refuse(f"aliases expand to more than {MAX_ALIAS_NODES} nodes")
        if len(self.open) + height > MAX_DEPTH:
            self.refuse(f"nests deeper than {MAX_DEPTH} levels (through an alias)")
        self.node(size, height, None)

    def start(self, anchor: str | None) -> None:
        self.open.append(_Open(anchor))
        if len(self.open) > MAX_DEPTH:
            self.refuse(f"nests deeper than {MAX_DEPTH} levels")

    def end(self) -> None:
        done = self.open.pop()
        self.node(done.size, done.height, done.anchor)

    def refuse(self, reason: str) -> None:
        raise ManifestError([f"{self.source}: document: {reason}"])


def _check_bounds(text: str, source: str) -> None:
    """Read the event stream once, refusing too deep nesting and alias bombs before building."""
    bounds = _Bounds(source, [], {})
    for event in yaml.parse(text, Loader=_SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            bounds.start(event.anchor)
        elif isinstance(event, yaml.CollectionEndEvent):
            bounds.end()
        elif isinstance(event, yaml.ScalarEvent):
            bounds.node(1, 0, event.anchor)
        elif isinstance(event, yaml.AliasEvent):
            bounds.alias(str(event.anchor))


class _DuplicateKey(Exception):
    """A map holds `key` at `at` and already at `first`: (line, column) of the whole stream,
    1-based. Columns are shown only when both are on one line (flow style, JSON)."""

    def __init__(self, key: object, *, at: tuple[int, int], first: tuple[int, int]) -> None:
        super().__init__(key, at, first)
        self.key, self.at, self.first = key, at, first

    def line_for(self, source: str) -> str:
        text = self.key if isinstance(self.key, str) else repr(self.key)
        cut = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"
        key = json.dumps(cut, ensure_ascii=False) if isinstance(self.key, str) else cut
        (line, column), (first_line, first_column) = self.at, self.first
        if line != first_line:
            return f"{source}: line {line}: duplicate key {key} (first at line {first_line})"
        return (
            f"{source}: line {line}, column {column}: duplicate key {key} "
            f"(first at line {first_line}, column {first_column})"
        )


def _maps_under(root: yaml.Node) -> Iterator[yaml.MappingNode]:
    """Every map node under `root`, each once (an alias is the node it names), in document order."""
    seen, pending = set[int](), [root]
    while pending:
        node = pending.pop()
        if id(node) in seen or isinstance(node, yaml.ScalarNode):
            continue
        seen.add(id(node))
        children = node.value
        if isinstance(node, yaml.MappingNode):
            yield node
            children = [child for pair in node.value for child in pair]
        pending.extend(reversed(children))


def _check_keys_unique(constructor: SafeConstructor, node: yaml.MappingNode) -> None:
    """Raise `_DuplicateKey` when two plain keys of `node` are equal once read (`1` and `0x1`
    are); merge keys and collection keys are left to the constructor."""
    first_seen: dict[object, tuple[int, int]] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
            continue
        key, mark = constructor.construct_object(key_node), key_node.start_mark
        at = (mark.line + 1, mark.column + 1)
        if key in first_seen:
            raise _DuplicateKey(key, at=at, first=first_seen[key])
        first_seen[key] = at


class _UniqueKeyLoader(_SafeLoader):
    """The safe loader, refusing a document with a map that holds a key twice, at any depth.
    Keys are checked on the composed nodes, before a merge key (`<<`) has rewritten any map."""

    def construct_document(self, node: yaml.Node) -> Any:
        for mapping in _maps_under(node):
            _check_keys_unique(self, mapping)
        return super().construct_document(node)


def _documents(text: str, source: str) -> list[Any]:
    try:
        _check_bounds(text, source)
        return [doc for doc in yaml.load_all(text, Loader=_UniqueKeyLoader) if doc is not None]
    except _DuplicateKey as exc:
        raise ManifestError([exc.line_for(source)]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "document"
        raise ManifestError([f"{source}: {where}: malformed YAML: {exc.problem}"]) from None
    except yaml.YAMLError as exc:
        raise ManifestError([f"{source}: document: malformed YAML: {exc}"]) from None
    except ManifestError:
        raise
    except ValueError as exc:  # e.g. an integer longer than Python reads (4300 digits)
        raise ManifestError([f"{source}: document: unreadable value: {exc}"]) from None


def _is_list(doc: dict[str, Any]) -> bool:
    kind = doc.get("kind")
    return isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list)


@dataclass(frozen=True, slots=True)
class Document:
    """One YAML document's objects; `is_list` when they are the `items` of a `List` kind."""

    objects: list[dict[str, Any]]
    is_list: bool


def load_documents(
    text: str, *, source: str, first_line: int = 0, first_document: int = 1
) -> list[Document]:
    """Each non-empty document in `text` (JSON is YAML too) with its objects: one for a plain
    document, its items for a `List` kind. `first_line` and `first_document` say where `text`
    starts in its file (a line from 0, a document from 1), so that messages name the file's own.

    Each object must be a map with `apiVersion` and `kind`; all problems are reported together.
    """
    documents: list[Document] = []
    problems: list[str] = []
    for number, doc in enumerate(
        _documents("\n" * first_line + text, source), start=first_document
    ):
        listed = isinstance(doc, dict) and _is_list(doc)
        objects: list[dict[str, Any]] = []
        for index, item in enumerate(doc["items"] if listed else [doc]):
            where = f"{source}: document {number}" + (f" item {index}" if listed else "")
            if not isinstance(item, dict):
                problems.append(f"{where}: (root): must be an object, got {type(item).__name__}")
                continue
            missing = [k for k in ("apiVersion", "kind") if not isinstance(item.get(k), str)]
            problems += [f"{where}: {key}: required" for key in missing]
            if not missing:
                objects.append(item)
        documents.append(Document(objects, is_list=listed))
    if problems:
        raise ManifestError(problems)
    return documents


def load_objects(text: str, *, source: str) -> list[dict[str, Any]]:
    """Every object in `text`, `List` kinds expanded into their items (`load_documents`)."""
    return [obj for document in load_documents(text, source=source) for obj in document.objects]


def dump_objects(objects: Iterable[dict[str, Any]], *, output: str) -> str:
    """Multi-document YAML, or one JSON `List`."""
    items = list(objects)
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2) + "\n"
    return yaml.dump_all(
        items, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096
    )
