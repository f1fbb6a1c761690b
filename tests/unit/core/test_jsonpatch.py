"""The RFC 6902 patch core plans and the CLI applies."""

from __future__ import annotations

from typing import Any

from vgpu_bridge.core.jsonpatch import apply_patch, escape


def test_json_patch_add_remove_and_append_leave_the_input_alone() -> None:
    doc: dict[str, Any] = {"a": {"x/y": 1, "k": 2}, "l": [1]}
    ops: list[dict[str, Any]] = [
        {"op": "remove", "path": f"/a/{escape('x/y')}"},
        {"op": "add", "path": "/l/-", "value": 2},
        {"op": "add", "path": "/b", "value": {"c": 3}},
        {"op": "replace", "path": "/a/k", "value": 5},
    ]
    assert apply_patch(doc, ops) == {"a": {"k": 5}, "l": [1, 2], "b": {"c": 3}}
    assert doc == {"a": {"x/y": 1, "k": 2}, "l": [1]}
