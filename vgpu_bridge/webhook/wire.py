"""HTTP/1.1 on the wire, the small part the webhook needs: read a request head, check its body
length, write a response. Every limit is checked before any conversion, so a hostile head costs
at most its (bounded) size: a 5,000-digit Content-Length is a 413, never an exception."""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus

MAX_HEAD_BYTES = 32 * 1024  # request line and headers together
MAX_HEADERS = 64
MAX_LENGTH_DIGITS = 18  # far above any body limit, far below int()'s digit limit
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


class HttpError(Exception):
    """A request we answer with `status` and close: its reason goes into the reply and the log."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Head:
    """An HTTP request line and its headers."""

    method: str
    target: str
    version: str
    headers: dict[str, str] = field(default_factory=dict)  # names lower-case

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def keep_alive(self) -> bool:
        connection = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"


# Headers that say where a body ends: given twice, a proxy and we could disagree on it.
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding"})


def head_end(buffer: bytes | bytearray) -> int:
    """Index just past the blank line that ends the head; -1 while it is incomplete. Raises 431
    once the buffer holds more than a head may be without that blank line."""
    end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
    if end >= 0:
        return end + 4
    if len(buffer) > MAX_HEAD_BYTES:
        raise HttpError(431, "request head too large")
    return -1


def parse_head(data: bytes) -> Head:
    """The request line and headers (`data` without the final blank line)."""
    try:
        text = data.decode("latin-1")
        request_line, *lines = text.split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        raise HttpError(400, "malformed request line") from None
    if method not in METHODS or version not in ("HTTP/1.0", "HTTP/1.1") or not target:
        raise HttpError(400, "malformed request line")
    if len(lines) > MAX_HEADERS:
        raise HttpError(431, "too many headers")
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HttpError(400, "malformed header line")
        if name.lower() in FRAMING_HEADERS and name.lower() in headers:
            raise HttpError(400, f"{name} given twice")  # which one frames the body is ambiguous
        headers[name.lower()] = value.strip()
    return Head(method, target, version, headers)


def body_length(head: Head, *, limit: int) -> int:
    """The body's size from Content-Length: 411 when a POST has none, 400 when it is not a
    number, 413 when it is above `limit`. Chunked bodies are refused (the API server sends a
    length)."""
    if "transfer-encoding" in head.headers:
        raise HttpError(411, "Content-Length required (no Transfer-Encoding)")
    text = head.headers.get("content-length")
    if text is None:
        if head.method in ("POST", "PUT", "PATCH"):
            raise HttpError(411, "Content-Length required")
        return 0
    if not text.isascii() or not text.isdigit():
        raise HttpError(400, "Content-Length is not a number")
    if len(text.lstrip("0")) > MAX_LENGTH_DIGITS or int(text) > limit:
        raise HttpError(413, "request body too large")
    return int(text)


def response(status: int, body: bytes, *, content_type: str, close: bool) -> bytes:
    """Status line, headers and body as one buffer (they leave in one write)."""
    head = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
    ]
    if close:
        head.append("Connection: close")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body
