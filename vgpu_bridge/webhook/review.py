"""AdmissionReview `admission.k8s.io/v1` on the wire: read a request, write a response."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, NamedTuple

API_VERSION = "admission.k8s.io/v1"
MAX_WARNING_CHARS = 256  # the API server drops longer warnings
MAX_LOGGED_CHARS = 256  # of a string from a review in a log line (a name may be 1 MB)


class BadReview(ValueError):
    """The body is not an AdmissionReview: answered with HTTP 400."""


class AdmissionRequest(NamedTuple):
    """The fields of an AdmissionReview's request that an admission reads (a NamedTuple: one is
    made per review, at half the cost of a frozen dataclass)."""

    uid: str
    operation: str
    namespace: str | None
    object: dict[str, Any]
    dry_run: bool
    kind: str


def parse_review(body: bytes) -> AdmissionRequest:
    """The request inside an AdmissionReview; `BadReview` says what is wrong with the body."""
    try:
        review = json.loads(body)
    except ValueError as exc:  # not UTF-8, not JSON, or a number too long for Python's int
        raise BadReview(f"body is not JSON: {exc}") from None
    except RecursionError:
        raise BadReview("body nests too deeply to read") from None
    if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
        raise BadReview("body is not an AdmissionReview")
    if review.get("apiVersion") != API_VERSION:
        raise BadReview(f"apiVersion must be {API_VERSION}, got {review.get('apiVersion')!r}")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise BadReview("request.uid is required")
    obj = request.get("object")
    kind = request.get("kind")
    return AdmissionRequest(
        uid=request["uid"],
        operation=str(request.get("operation", "")),
        namespace=request.get("namespace") if isinstance(request.get("namespace"), str) else None,
        object=obj if isinstance(obj, dict) else {},
        dry_run=request.get("dryRun") is True,
        kind=str(kind.get("kind", "")) if isinstance(kind, dict) else "",
    )


def logged(value: object) -> object:
    """A value from a review as a log line may hold it: a string cut to MAX_LOGGED_CHARS (with
    its length), a number, bool or None as it is, anything else only named by its type."""
    if isinstance(value, str):
        if len(value) <= MAX_LOGGED_CHARS:
            return value
        return f"{value[:MAX_LOGGED_CHARS]}…({len(value)} chars)"
    if value is None or isinstance(value, bool | int | float):
        return value
    return f"({type(value).__name__})"


def _review(response: dict[str, Any]) -> bytes:
    return json.dumps(
        {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
    ).encode()


def _warnings(warnings: Sequence[str]) -> list[str]:
    return [
        w if len(w) <= MAX_WARNING_CHARS else w[: MAX_WARNING_CHARS - 1] + "…" for w in warnings
    ]


def allow(uid: str, *, patch: Sequence[dict[str, Any]] = (), warnings: Sequence[str] = ()) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(list(patch)).encode()).decode()
    if warnings:
        response["warnings"] = _warnings(warnings)
    return _review(response)


def deny(uid: str, reasons: Sequence[str], *, code: int = 403) -> bytes:
    message = "; ".join(reasons)
    return _review({"uid": uid, "allowed": False, "status": {"code": code, "message": message}})
