"""The request head parser: what frames a body must be unambiguous."""

from __future__ import annotations

import pytest

from vgpu_bridge.webhook.wire import HttpError, body_length, parse_head

POST = "POST /mutate HTTP/1.1\r\nHost: x\r\n"


@pytest.mark.parametrize(
    "framing",
    [
        "Content-Length: 2\r\nContent-Length: 3",
        "Content-Length: 2\r\ncontent-length: 2",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
    ],
    ids=["two-lengths", "same-length-twice", "two-encodings"],
)
def test_a_framing_header_given_twice_is_a_400(framing: str) -> None:
    with pytest.raises(HttpError) as raised:
        parse_head((POST + framing).encode())
    assert raised.value.status == 400


def test_one_content_length_frames_the_body() -> None:
    head = parse_head((POST + "Content-Length: 12\r\nAccept: a\r\nAccept: b").encode())
    assert body_length(head, limit=100) == 12
