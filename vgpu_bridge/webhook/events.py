"""Kubernetes Events (`events.k8s.io/v1`) about the webhook's decisions, without an Event storm.

An admission only puts its occurrences on a bounded queue (full: dropped and counted); it is never
delayed or failed by them. One worker thread posts them after the admitted object exists:
- identical occurrences (same object, type, reason, action and note) within `WINDOW_S` aggregate
  into one Event, whose `series` (count, last seen) is written at most every `SERIES_EVERY_S`;
- a new Event takes a token from its namespace's bucket and from the overall one; without one the
  occurrence is dropped and counted (`vgpu_bridge_events_dropped_total{reason="rate-limited"}`).
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Protocol

from vgpu_bridge.kube import KubeApi, KubeError, api_path, dns_subdomain_problem
from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook.event_notes import ObjectRef, Occurrence

log = get_logger("vgpu_bridge.webhook")
EVENTS_API = "/apis/events.k8s.io/v1"
WINDOW_S = 600.0  # an occurrence later than this after the last one starts a new Event
SERIES_EVERY_S = 5.0
QUEUE_SIZE = 1000
SETTLE_S = 0.5  # an admitted object is stored shortly after the answer: first look then
LOOKUPS = 3  # `retry_s` apart; an object not found by then was refused after us: no Event
CLOCK_SKEW_S = 5.0  # a stored object created this much before its admission is an older one


@dataclass(frozen=True, slots=True)
class Limit:
    """A token bucket: `burst` Events at once, then `per_s` a second."""

    burst: int
    per_s: float


PER_NAMESPACE = Limit(burst=20, per_s=0.2)
OVERALL = Limit(burst=100, per_s=5.0)


@dataclass(slots=True)
class TokenBucket:
    limit: Limit
    tokens: float
    at: float

    def take(self, now: float) -> bool:
        elapsed = max(0.0, now - self.at)
        self.tokens = min(float(self.limit.burst), self.tokens + elapsed * self.limit.per_s)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class Verdict(Enum):
    NEW = "new"  # post a new Event
    REPEAT = "repeat"  # counted in an existing Event's series
    LIMITED = "limited"  # dropped by a rate limit


@dataclass(slots=True)
class Series:
    """One posted Event and how often its occurrence has been seen."""

    namespace: str
    name: str
    count: int
    last_seen: float  # clock
    last_seen_wall: float
    written: int = 1  # the count the API server holds
    written_at: float = 0.0
    key: tuple[str, ...] = ()


@dataclass
class EventBook:
    """Decides, for each occurrence, whether it makes a new Event, repeats one, or is dropped.
    Pure bookkeeping over an injected clock; bounded in keys and namespaces."""

    per_namespace: Limit = PER_NAMESPACE
    overall: Limit = OVERALL
    window_s: float = WINDOW_S
    max_series: int = 4096
    max_namespaces: int = 1024
    _series: OrderedDict[tuple[str, ...], Series] = field(default_factory=OrderedDict)
    _buckets: OrderedDict[str, TokenBucket] = field(default_factory=OrderedDict)
    _overall: TokenBucket | None = None

    def observe(self, key: tuple[str, ...], namespace: str, *, now: float, wall: float) -> Verdict:
        known = self._series.get(key)
        if known is not None and now - known.last_seen <= self.window_s:
            known.count += 1
            known.last_seen, known.last_seen_wall = now, wall
            self._series.move_to_end(key)
            return Verdict.REPEAT
        if not self._take(namespace, now):
            return Verdict.LIMITED
        return Verdict.NEW

    def posted(self, key: tuple[str, ...], series: Series) -> None:
        """Remember the Event just posted for `key`; the oldest is forgotten beyond the bound."""
        self._series[key] = series
        self._series.move_to_end(key)
        while len(self._series) > self.max_series:
            self._series.popitem(last=False)

    def forget(self, series: Series) -> None:
        """The Event is gone (expired on the API server): the next occurrence posts a new one."""
        if self._series.get(series.key) is series:
            del self._series[series.key]

    def due(self, *, now: float, every_s: float = SERIES_EVERY_S) -> list[Series]:
        """Series whose count the API server does not hold yet, last written `every_s` ago."""
        return [
            s
            for s in self._series.values()
            if s.count > s.written and now - s.written_at >= every_s
        ]

    def _take(self, namespace: str, now: float) -> bool:
        if self._overall is None:
            self._overall = TokenBucket(self.overall, float(self.overall.burst), now)
        bucket = self._buckets.get(namespace)
        if bucket is None:
            bucket = TokenBucket(self.per_namespace, float(self.per_namespace.burst), now)
            self._buckets[namespace] = bucket
            while len(self._buckets) > self.max_namespaces:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(namespace)
        if bucket.take(now):
            if self._overall.take(now):
                return True
            bucket.tokens += 1  # not used after all
        return False


def micro_time(wall: float) -> str:
    """A `MicroTime` as the API server writes it."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Counts(Protocol):
    """A counter labelled by reason (`WebhookMetrics.events_dropped`): `labels(r).inc()`."""

    def labels(self, *values: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class _Queued:
    occurrence: Occurrence
    at: float  # clock
    wall: float


@dataclass
class EventRecorder:
    """Takes occurrences from admissions without waiting; its `run` thread posts them."""

    api: KubeApi
    controller: str  # reportingController: the driver's name
    instance: str  # reportingInstance: this webhook's pod (host) name
    dropped: Counts  # by reason: queue-full, rate-limited, not-found, api-error
    book: EventBook = field(default_factory=EventBook)
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    queue_size: int = QUEUE_SIZE
    settle_s: float = SETTLE_S
    retry_s: float = 1.0
    _queue: queue.Queue[_Queued] = field(init=False)

    def __post_init__(self) -> None:
        self._queue = queue.Queue(maxsize=self.queue_size)

    def record(self, occurrences: Iterable[Occurrence]) -> None:
        for occurrence in occurrences:
            try:
                self._queue.put_nowait(_Queued(occurrence, self.clock(), self.wall()))
            except queue.Full:
                self.dropped.labels("queue-full").inc()

    def run(self, stop: threading.Event) -> None:
        """Post until `stop` is set."""
        while not stop.is_set():
            try:
                self._post(self._queue.get(timeout=1.0), stop)
            except queue.Empty:
                pass
            except Exception:  # the API unreachable after the client's retries: this one is lost
                self.dropped.labels("api-error").inc()
                log.exception("posting an event failed")
            self.write_series()

    def work_off(self, stop: threading.Event) -> None:
        """Post everything queued now, then the series that are due (tests; `run` loops)."""
        while True:
            try:
                self._post(self._queue.get_nowait(), stop)
            except queue.Empty:
                break
        self.write_series()

    def _post(self, queued: _Queued, stop: threading.Event) -> None:
        occurrence = queued.occurrence
        namespace = occurrence.regarding.namespace
        verdict = self.book.observe(occurrence.key, namespace, now=self.clock(), wall=queued.wall)
        if verdict is Verdict.REPEAT:
            return
        if verdict is Verdict.LIMITED:
            self.dropped.labels("rate-limited").inc()
            return
        regarding = occurrence.regarding
        if occurrence.lookup is not None:
            try:
                found = self._stored(occurrence.lookup, queued, stop)
            except KubeError as error:
                self._failed(error, occurrence, regarding)
                return
            if found is None:
                self.dropped.labels("not-found").inc()
                return
            regarding = replace(regarding, uid=found)
        self._create(occurrence, regarding, queued)

    def _failed(self, error: KubeError, occurrence: Occurrence, regarding: ObjectRef) -> None:
        self.dropped.labels("api-error").inc()
        log.warning("cannot post an event", error=str(error), reason=occurrence.reason,
                    namespace=regarding.namespace, name=regarding.name)  # fmt: skip

    def _create(self, occurrence: Occurrence, regarding: ObjectRef, queued: _Queued) -> None:
        body = self.event_body(occurrence, regarding, wall=queued.wall)
        namespace = regarding.namespace
        try:
            self.api.create(api_path(EVENTS_API, "namespaces", namespace, "events"), body)
        except KubeError as error:
            self._failed(error, occurrence, regarding)
            return
        name = body["metadata"]["name"]
        now = self.clock()
        series = Series(namespace, name, 1, now, queued.wall, written_at=now, key=occurrence.key)
        self.book.posted(occurrence.key, series)

    def _stored(self, path: str, queued: _Queued, stop: threading.Event) -> str | None:
        """The uid of the object named as `queued` names it in the collection at `path` once it
        is stored, if this admission created it (not an older one of the same name); None when
        it does not appear."""
        delay = queued.at + self.settle_s - self.clock()
        for _ in range(LOOKUPS):
            if (delay > 0 and stop.wait(delay)) or stop.is_set():
                return None
            delay = self.retry_s
            name = queued.occurrence.regarding.name
            items = self.api.list(path, fieldSelector=f"metadata.name={name}").get("items") or []
            if items:
                meta = items[0].get("metadata") or {}
                return _uid_if_created_after(meta, queued.wall - CLOCK_SKEW_S)
        return None

    def event_body(self, occurrence: Occurrence, regarding: ObjectRef, *, wall: float) -> Any:
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": _event_name(regarding), "namespace": regarding.namespace},
            "eventTime": micro_time(wall),
            "reportingController": self.controller,
            "reportingInstance": self.instance[:128],
            "action": occurrence.action,
            "reason": occurrence.reason,
            "type": occurrence.type,
            "regarding": regarding.regarding(),
            "note": occurrence.note,
        }

    def write_series(self) -> None:
        """Bring the API server's count of each repeated Event up to date (a merge patch); one
        that cannot be written waits for its next repeat, one that is gone is forgotten."""
        now = self.clock()
        for series in self.book.due(now=now):
            series.written, series.written_at = series.count, now
            path = api_path(EVENTS_API, "namespaces", series.namespace, "events", series.name)
            patch = {"series": {"count": series.count,
                                "lastObservedTime": micro_time(series.last_seen_wall)}}  # fmt: skip
            try:
                self.api.merge_patch(path, patch)
            except KubeError as error:
                if error.status == 404:
                    self.book.forget(series)
                log.warning("cannot update an event's series", status=error.status, path=path)
            except Exception:  # the API unreachable after the client's retries
                log.exception("cannot update an event's series", path=path)


def _uid_if_created_after(meta: dict[str, Any], earliest: float) -> str | None:
    uid, created = meta.get("uid"), meta.get("creationTimestamp")
    if not isinstance(uid, str) or not uid or not isinstance(created, str):
        return None
    try:
        stamp = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return uid if stamp.timestamp() >= earliest - 1 else None  # stamps are whole seconds


def _event_name(regarding: ObjectRef) -> str:
    """`<object>.<random>`, as other controllers name Events; always a DNS subdomain."""
    base = regarding.name if not dns_subdomain_problem(regarding.name) else regarding.namespace
    return f"{base[:236].rstrip('.-')}.{secrets.token_hex(8)}"
