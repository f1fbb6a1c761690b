"""`streamed_list.read_list`: a list body decoded one item at a time, whatever its chunks: the
same items and metadata as `json.loads` of the whole body, each item handed to `keep` as soon as
it is decoded, and a body that is no JSON object refused with `ListFormatError`."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_bridge.streamed_list import ListFormatError, read_list

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def chunked(data: bytes, cuts: list[int]) -> Iterator[bytes]:
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    yield from (data[a:b] for a, b in itertools.pairwise(edges))


@given(
    items=st.lists(json_values, max_size=6),
    extra=st.dictionaries(st.sampled_from(["kind", "apiVersion", "other"]), json_values),
    metadata_first=st.booleans(),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
)
def test_any_chunks_give_what_decoding_the_whole_body_gives(
    items: list[Any], extra: dict[str, Any], metadata_first: bool, cuts: list[int]
) -> None:
    meta = {"resourceVersion": "7", "continue": "t"}
    parts = [("metadata", meta), ("items", items)]
    body = dict([*extra.items(), *(parts if metadata_first else parts[::-1])])
    data = json.dumps(body, ensure_ascii=False, indent=None if cuts else 1).encode()
    assert read_list(chunked(data, cuts)) == (items, meta)


def test_every_split_of_a_small_body_reads_the_same() -> None:
    data = b' { "items" : [ {"a": 12345}, 678, -1.5e3, "\\u00e9\xc3\xa9" ] , "metadata": {} } '
    for cut in range(len(data) + 1):
        assert read_list([data[:cut], data[cut:]]) == ([{"a": 12345}, 678, -1500.0, "éé"], {})


def test_each_item_is_kept_as_it_is_decoded_and_none_dropped() -> None:
    seen: list[int] = []

    def keep(item: dict[str, int]) -> int | None:
        seen.append(item["n"])
        return None if item["n"] % 2 else item["n"] * 10

    data = json.dumps({"items": [{"n": n} for n in range(6)]}).encode()
    items, meta = read_list(chunked(data, list(range(0, len(data), 3))), keep=keep)
    assert (items, meta, seen) == ([0, 20, 40], {}, list(range(6)))


def test_a_big_item_in_small_chunks_is_read_whole() -> None:
    item = {"spec": {"selectors": ["x" * 100_000] * 4}}
    data = json.dumps({"items": [item, item], "metadata": {"resourceVersion": "3"}}).encode()
    items, meta = read_list(chunked(data, list(range(0, len(data), 4096))))
    assert items == [item, item]
    assert meta == {"resourceVersion": "3"}


def test_null_items_and_an_empty_object_are_an_empty_list() -> None:
    assert read_list([b'{"items": null}']) == ([], {})
    assert read_list([b"{}"]) == ([], {})


@pytest.mark.parametrize(
    "data",
    [b"", b"[]", b'{"items": [1, 2', b'{"items": [1 2]}', b'{"items": []', b"{'a': 1}", b"nul"],
)
def test_a_body_that_is_no_whole_json_object_is_refused(data: bytes) -> None:
    with pytest.raises(ListFormatError):
        read_list([data])
