"""A list response of the Kubernetes API decoded one item at a time, as its bytes arrive.

`json.loads` of a whole page holds the page's bytes, its text and every object at once: a page of
500 ResourceClaims of 1.26 MiB (within the API's limits) is 630 MB of bytes and as much again of
objects (issue 35: a webhook replica peaked at 864 MB listing 300 of them). Here the text held is
at most an item or two beyond the chunk being read, and each item is handed to `keep` as soon as
it is decoded, so a caller that keeps little of each never holds the page. The standard library's
decoder does the work (`raw_decode` of one value at a time); no streaming JSON package is needed
for a shape this simple: an object whose `items` is an array, its other members small.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_NUMBER_GOES_ON = frozenset("0123456789.eE+-")


class ListFormatError(ValueError):
    """The body is not a JSON object (or ends before it does)."""


class _Text:
    """The not yet decoded text of a body arriving in chunks."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.text, self.at, self.ended = "", 0, False

    def more(self) -> bool:
        """Read one more chunk (the decoded part dropped); False once the body has ended."""
        if self.ended:
            return False
        chunk = next(self._chunks, None)
        self.ended = chunk is None
        self.text = self.text[self.at :] + self._utf8.decode(chunk or b"", final=self.ended)
        self.at = 0
        return not self.ended

    def next_char(self) -> str:
        """The next character that is not white space (not consumed)."""
        while True:
            self.at = _SPACE.match(self.text, self.at).end()  # type: ignore[union-attr]
            if self.at < len(self.text):
                return self.text[self.at]
            if not self.more() and self.at >= len(self.text):
                raise ListFormatError("the body ended inside its JSON")

    def take(self, char: str) -> None:
        found = self.next_char()
        if found != char:
            raise ListFormatError(f"expected {char!r} at character {self.at}, found {found!r}")
        self.at += 1

    def value(self) -> Any:
        """The next whole JSON value; tried again each time the text held has doubled, so a
        value of n bytes costs about 2n of decoding however small the chunks."""
        self.next_char()
        tried_with = 0
        while True:
            held = len(self.text) - self.at
            if held > 2 * tried_with or self.ended:
                try:
                    value, end = _DECODER.raw_decode(self.text, self.at)
                except json.JSONDecodeError as error:
                    if self.ended:
                        raise ListFormatError(str(error)) from None
                else:
                    if self.ended or not self._may_go_on(value, end):
                        self.at = end
                        return value
                tried_with = held
            self.more()

    def _may_go_on(self, value: Any, end: int) -> bool:
        """Whether a number decoded up to `end` may be the start of a longer one (`-1` of
        `-1.5e3`) that the next chunk completes; nothing but a number can."""
        if not isinstance(value, int | float):
            return False
        return end >= len(self.text) or self.text[end] in _NUMBER_GOES_ON


def read_list(
    chunks: Iterable[bytes], *, keep: Callable[[Any], Any | None] | None = None
) -> tuple[list[Any], dict[str, Any]]:
    """The items of a list body (each as `keep` makes it, None dropped) and its `metadata`."""
    text = _Text(chunks)
    items: list[Any] = []
    metadata: dict[str, Any] = {}
    text.take("{")
    if text.next_char() == "}":
        return items, metadata
    while True:
        key = text.value()
        text.take(":")
        if key == "items" and text.next_char() == "[":
            _read_items(text, items, keep)
        else:
            value = text.value()
            if key == "metadata" and isinstance(value, dict):
                metadata = value
        if text.next_char() == "}":
            return items, metadata
        text.take(",")


def _read_items(text: _Text, items: list[Any], keep: Callable[[Any], Any | None] | None) -> None:
    text.take("[")
    if text.next_char() == "]":
        text.take("]")
        return
    while True:
        if keep is None:
            items.append(text.value())
        elif (kept := keep(text.value())) is not None:  # the item itself is not held after
            items.append(kept)
        if text.next_char() == "]":
            text.take("]")
            return
        text.take(",")
