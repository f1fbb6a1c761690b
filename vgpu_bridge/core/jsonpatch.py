"""RFC 6902 JSON Patch: the few operations a translation emits, and applying them."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

PatchOp = dict[str, Any]


def escape(token: str) -> str:
    """One JSON-pointer reference token: `nvidia.com/gpu` → `nvidia.com~1gpu`."""
    return token.replace("~", "~0").replace("/", "~1")


def _tokens(pointer: str) -> list[str]:
    if not pointer.startswith("/"):
        raise ValueError(f"not a JSON pointer: {pointer!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


def apply_patch(doc: Any, ops: Iterable[PatchOp]) -> Any:
    """A patched deep copy of `doc`; `doc` itself is not changed."""
    result = copy.deepcopy(doc)
    for op in ops:
        tokens = _tokens(op["path"])
        parent, last = _parent(result, tokens), tokens[-1]
        kind = op["op"]
        if kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif kind in ("add", "replace") and isinstance(parent, list):
            value = copy.deepcopy(op["value"])
            if last == "-":
                parent.append(value)
            elif kind == "add":
                parent.insert(int(last), value)
            else:
                parent[int(last)] = value
        elif kind in ("add", "replace"):
            if kind == "replace" and last not in parent:
                raise KeyError(f"replace of missing member {op['path']}")
            parent[last] = copy.deepcopy(op["value"])
        else:
            raise ValueError(f"unsupported JSON patch op {kind!r}")
    return result
