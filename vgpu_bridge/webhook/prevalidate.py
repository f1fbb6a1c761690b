"""Big reviews are read first by a child process, outside the webhook's interpreter lock.

Reading a 0.5 MB review (a pod of 5,000 containers) holds the interpreter's lock for 5-15 ms
without a break: during a flood of them every other thread, the one that moves every connection's
bytes included, waits that long at each turn, and another namespace's admission took 35 ms where
it takes 3 (issue 25, `bench/webhook.py`'s flood row). So a review of `min_bytes` or more goes to
a child process first (`python -m vgpu_bridge.webhook.prevalidate`), which reads it and checks its
shape and bounds (`core.shapes.check_shape`). What it refuses is answered from its verdict, as the
webhook itself would answer it, without the webhook reading the body at all; what it finds sound
is read and admitted by the webhook as ever (a big sound object is rare: its body is read twice).

The child is started on first use and again after it dies (at most every RETRY_S); without a
verdict (it cannot start, died, or answered nonsense) the webhook reads the review itself: the old
way, never a failure.
"""

from __future__ import annotations

import json
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from vgpu_bridge.core.errors import InvalidRequest
from vgpu_bridge.core.shapes import check_shape
from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook import review
from vgpu_bridge.webhook.workqueue import HEAVY_BYTES

if TYPE_CHECKING:
    import subprocess

log = get_logger("vgpu_bridge.webhook.prevalidate")
#: a review this big or bigger is read by the child first: the worker queue's heavy size
MIN_BYTES = HEAVY_BYTES
_LENGTH = struct.Struct(">Q")
_NAME_CHARS = 253  # metadata strings kept in a verdict's object stub (DNS subdomain length)
_MAX_OWNERS = 16
RETRY_S = 30.0  # after the child failed, reviews are read in-process this long before a restart


@dataclass(frozen=True, slots=True)
class Verdict:
    """The child's reading of a review: not an AdmissionReview (`bad`), or refused for its shape
    (`request` as far as an answer, its log line and its Events need, `reasons`)."""

    bad: str | None = None
    request: review.AdmissionRequest | None = None
    reasons: tuple[str, ...] = ()


class Prevalidator:
    """The child process, one review at a time (callers take turns)."""

    def __init__(
        self,
        *,
        min_bytes: int = MIN_BYTES,
        command: list[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_bytes, self._clock = min_bytes, clock
        self._failed_at: float | None = None
        self._command = command or [sys.executable, "-m", "vgpu_bridge.webhook.prevalidate"]
        self._child: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def verdict(self, body: bytes) -> Verdict | None:
        """The child's verdict on a refused or unreadable review; None: read it in-process (it is
        sound, small, or the child gave no answer)."""
        if len(body) < self.min_bytes:
            return None
        with self._lock:
            if self._failed_at is not None and self._clock() < self._failed_at + RETRY_S:
                return None
            try:
                answer = self._ask(body)
            except (OSError, ValueError) as error:
                self._failed_at = self._clock()
                log.warning("prevalidation failed; reading the review in-process",
                            reason=str(error)[:200])  # fmt: skip
                self._stop_child()
                return None
        return _verdict(answer)

    def start(self) -> None:
        """Start the child ahead of the first big review (in the background, once serving)."""
        with self._lock:
            try:
                self._running()
            except OSError as error:
                log.warning("cannot start the prevalidating child", reason=str(error)[:200])
                self._failed_at = self._clock()

    def close(self) -> None:
        with self._lock:
            self._stop_child()

    def _running(self) -> subprocess.Popen[bytes]:
        import subprocess  # off the start path

        child = self._child
        if child is None or child.poll() is not None:
            child = self._child = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # the webhook's log is JSON lines only
            )
        return child

    def _ask(self, body: bytes) -> Any:
        child = self._running()
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write(_LENGTH.pack(len(body)))
        child.stdin.write(body)
        child.stdin.flush()
        line = child.stdout.readline()
        if not line:
            raise ValueError("the prevalidating child gave no answer")
        return json.loads(line)

    def _stop_child(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            self._child = None


def _verdict(answer: object) -> Verdict | None:
    if not isinstance(answer, dict):
        return None
    if isinstance(answer.get("bad"), str):
        return Verdict(bad=answer["bad"])
    reasons, request = answer.get("refused"), answer.get("request")
    if not isinstance(reasons, list) or not isinstance(request, dict):
        return None
    try:
        parsed = review.AdmissionRequest(**request)
    except TypeError:
        return None
    return Verdict(request=parsed, reasons=tuple(str(r) for r in reasons))


def read(body: bytes) -> dict[str, Any]:
    """The child's answer for one review: {"bad": why}, {"refused": [lines], "request": {...}}
    or {"sound": true}."""
    try:
        request = review.parse_review(body)
    except review.BadReview as exc:
        return {"bad": str(exc)}
    try:
        check_shape(request.object)
    except InvalidRequest as exc:
        stub = {**_stub(request), "object": _object_stub(request.object)}
        return {"refused": exc.lines(), "request": stub}
    return {"sound": True}


def _stub(request: review.AdmissionRequest) -> dict[str, Any]:
    return {"uid": request.uid, "operation": request.operation, "namespace": request.namespace,
            "dry_run": request.dry_run, "kind": request.kind}  # fmt: skip


def _object_stub(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the log line and a refusal's Event read of the object: its kind and the names and
    owners in its metadata."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    kept: dict[str, Any] = {k: v for k in ("name", "generateName", "namespace", "uid")
                            if _short(v := meta.get(k))}  # fmt: skip
    owners = meta.get("ownerReferences")
    if isinstance(owners, list):
        kept["ownerReferences"] = [
            {k: v for k, v in owner.items() if _short(v) or isinstance(v, bool)}
            for owner in owners[:_MAX_OWNERS]
            if isinstance(owner, Mapping)
        ]
    stub = {k: v for k in ("apiVersion", "kind") if _short(v := obj.get(k))}
    return {**stub, "metadata": kept}


def _short(value: object) -> bool:
    return isinstance(value, str) and len(value) <= _NAME_CHARS


def serve(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """The child's loop: a length-prefixed review in, one JSON line out, until stdin closes."""
    while header := stdin.read(_LENGTH.size):
        if len(header) < _LENGTH.size:
            return
        (length,) = _LENGTH.unpack(header)
        body = stdin.read(length)
        stdout.write(json.dumps(read(body)).encode() + b"\n")
        stdout.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
