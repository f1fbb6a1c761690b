"""Manifests rewritten the way a GitOps repository wants them: only what changed, changed.

A manifest file is cut into its documents at the lines that start one (`---`). A document that
translation leaves alone is written back as the very text it was. A document that translation
changes is read by a round-trip YAML reader (ruamel.yaml), which keeps its comments, key order,
flow style and quoting; the translation's JSON patch is applied to that tree, and the tree is
written with the indentation the document used. The claim templates it needs follow it as new
documents, in the same indentation.

Limits (said in docs/translation.md): a document that mixes two sequence indentations comes back in
the first one the reader guesses; a file with a directive (`%YAML`) or content on a `---` line is
one piece, so its untouched documents are rewritten too.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from vgpu_bridge.core.jsonpatch import PatchOp, apply_patch
from vgpu_bridge.manifests import ManifestError

#: a line that starts a document and holds nothing else but a comment
_BARE_START = re.compile(r"---(?:[ \t]+#.*|[ \t]*)\r?\n?")
_ANY_START = re.compile(r"---(?:[ \t\r\n]|$)")
_WIDTH = 1 << 16  # never re-flow a long line


@dataclass(frozen=True, slots=True)
class Piece:
    """The text of one document (or, in a file that cannot be cut, of all of them).

    `header` is the `---` line that opens it ("" for a first document without one), `body` the
    rest up to the next `---` line, `first_line` the 0-based line of the file where `body`
    starts (so that errors name the file's own lines).
    """

    header: str
    body: str
    first_line: int


def pieces(text: str) -> list[Piece]:
    """`text` cut at its document starts; one piece when it cannot be cut safely."""
    lines = text.splitlines(keepends=True)
    if any(line.startswith("%") for line in lines) or any(
        _ANY_START.match(line) and not _BARE_START.fullmatch(line) for line in lines
    ):
        return [Piece("", text, 0)]
    found: list[Piece] = []
    header, body, first = "", list[str](), 0
    for number, line in enumerate(lines):
        if _BARE_START.fullmatch(line):
            if header or body:
                found.append(Piece(header, "".join(body), first))
            header, body, first = line, [], number + 1
        else:
            body.append(line)
    if header or body or not found:
        found.append(Piece(header, "".join(body), first))
    return found


@dataclass(frozen=True, slots=True)
class Change:
    """What translation does to one object of a document: `item` is its index in a `List`
    document's `items` (None for the document itself)."""

    document: int
    item: int | None
    patch: Sequence[PatchOp]


def _layout(body: str) -> YAML:
    """A round-trip reader and writer that keeps `body`'s indentation."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = _WIDTH
    mapping, dash_offset = _indentation(body)
    yaml.indent(mapping=mapping, sequence=dash_offset + 2, offset=dash_offset)
    return yaml


def _indentation(body: str) -> tuple[int, int]:
    """How far `body` indents a map under its key, and a list's dashes under theirs: the first
    of each found (2 and 0, kubectl's style, when there is none)."""
    mapping: int | None = None
    dash_offset: int | None = None
    lines = [line for line in body.splitlines() if line.strip() and line.lstrip()[0] != "#"]
    for above, below in itertools.pairwise(lines):
        if not above.rstrip().endswith(":"):
            continue
        key_column = len(above) - len(above.lstrip(" -"))
        spaces = len(below) - len(below.lstrip(" "))
        if below.lstrip().startswith("- ") or below.strip() == "-":
            dash_offset = spaces - key_column if dash_offset is None else dash_offset
        elif spaces > key_column:
            mapping = spaces - key_column if mapping is None else mapping
        if mapping is not None and dash_offset is not None:
            break
    mapping = mapping or 2
    return mapping, max(0, min(dash_offset or 0, mapping))


def rewrite(
    piece: Piece,
    changes: Iterable[Change],
    templates: Sequence[dict[str, Any]],
    *,
    source: str,
) -> str:
    """The piece's text with `changes` applied and `templates` written after it."""
    changes = list(changes)
    yaml = _layout(piece.body)
    out = io.StringIO()
    out.write(piece.header)
    if changes:
        try:
            documents = [d for d in yaml.load_all(piece.body) if d is not None]
            for change in changes:
                documents[change.document] = _patched(documents[change.document], change)
        except (YAMLError, LookupError, TypeError, ValueError) as exc:
            where = f"line {piece.first_line + 1}"
            raise ManifestError(
                [f"{source}: {where}: cannot keep this document's layout ({exc}); use -o json"]
            ) from None
        yaml.dump_all(documents, out)
    else:
        out.write(piece.body)
    for template in templates:
        _end_line(out)
        out.write("---\n")
        yaml.dump(template, out)
    return out.getvalue()


def _patched(document: Any, change: Change) -> Any:
    if change.item is None:
        return _metadata_before_spec(apply_patch(document, change.patch), change.patch)
    items = document["items"]
    items[change.item] = _metadata_before_spec(
        apply_patch(items[change.item], change.patch), change.patch
    )
    return document


def _metadata_before_spec(document: Any, patch: Sequence[PatchOp]) -> Any:
    """A `metadata` the patch added to a map that has a `spec` (a pod template that had no
    labels) moved before it, where a reader looks for it; a new key otherwise goes last."""
    for op in patch:
        path = op["path"]
        if op["op"] != "add" or not path.endswith("/metadata"):
            continue
        parent = document
        for token in path.split("/")[1:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        if isinstance(parent, CommentedMap) and "spec" in parent:
            keys = list(parent)
            if keys.index("metadata") > keys.index("spec"):
                parent.insert(keys.index("spec"), "metadata", parent.pop("metadata"))
    return document


def _end_line(out: io.StringIO) -> None:
    text = out.getvalue()
    if text and not text.endswith("\n"):
        out.write("\n")
