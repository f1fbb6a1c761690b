"""The reviews waiting for a worker: bounded, shared fairly between namespaces, each with the
deadline its caller set.

A flood of big reviews from one namespace must not make every other namespace wait behind it
(issue 25): the queue holds at most `max_items` reviews and `max_bytes` of their bodies, hands
them out round-robin between keys (a review's namespace), and when it is full the key holding
the most bytes gives way: its newest review is refused at once (HTTP 503, so the API server
applies the webhook's failurePolicy instead of waiting for its timeout). Every job weighs at
least FLOOR_BYTES, so jobs without a body can never pile up weightless under one key while
another key's real reviews give way (issue 35). A review whose caller's
timeout has passed before a worker takes it is dropped without being computed: the API server
has already answered it.

Big reviews are also kept from crowding out small ones where threads cannot help: reading a
0.5 MB review holds the interpreter's lock for several milliseconds at a stretch, so every
other thread (the selector's included) waits that long for each turn it takes. At most
`max_heavy` reviews of `heavy_bytes` or more are handed out at a time; while they are, the
workers take the other keys' reviews.
"""

from __future__ import annotations

import functools
import queue
import re
import threading
from collections import OrderedDict, deque
from typing import Generic, NamedTuple, TypeVar
from urllib.parse import parse_qs, urlsplit

Item = TypeVar("Item")
#: the API server's longest webhook timeout (timeoutSeconds is at most 30)
MAX_CALLER_TIMEOUT_S = 30.0
#: where a review's namespace is looked for: the API server writes request.namespace before the
#: object, within the first few hundred bytes
NAMESPACE_WINDOW = 16 * 1024
#: a review this big or bigger is heavy (a pod of a few hundred containers; most are < 20 KiB)
HEAVY_BYTES = 128 * 1024
#: the least a job weighs against the byte bound and in choosing who gives way (a bodiless GET
#: weighed 0: a flood of them under one key never gave way, a real review beside them did)
FLOOR_BYTES = 4 * 1024
_NAMESPACE = re.compile(rb'"namespace"\s*:\s*"([^"\\]{0,253})"')
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
           "h": 3600.0}  # fmt: skip


class Job(NamedTuple, Generic[Item]):
    """One queued piece of work: `item`, the key it is shared out by, its size, its deadline (a
    tuple: made for every queued review, where a frozen dataclass cost ten times as much)."""

    item: Item
    key: str
    size: int
    deadline: float


class FairQueue(Generic[Item]):
    """Bounded by count and bytes, round-robin between keys; `put` from one thread (the selector),
    `get` from any number (the workers).

    Workers wait on a `queue.SimpleQueue` of wake-ups, one per job put, sent after the lock is
    released: a `threading.Condition` notified under its lock woke a worker only to block it
    again on that lock, and cost the worker path 0.7x the throughput of a plain queue (issue 35,
    `bench/webhook.py --ab`). A wake-up whose job was refused meanwhile wakes a worker for
    nothing; one that finds only heavy jobs held back is kept until a heavy job is done."""

    def __init__(
        self, *, max_items: int, max_bytes: int, heavy_bytes: int = HEAVY_BYTES, max_heavy: int = 1
    ) -> None:
        if min(max_items, max_bytes, heavy_bytes, max_heavy) < 1:
            raise ValueError("max_items, max_bytes, heavy_bytes and max_heavy must be at least 1")
        self.max_items, self.max_bytes = max_items, max_bytes
        self.heavy_bytes, self.max_heavy = heavy_bytes, max_heavy
        self._heavy_out = 0  # heavy jobs handed out and not yet done
        self._keys: OrderedDict[str, deque[Job[Item]]] = OrderedDict()  # next to serve first
        self._bytes_by_key: dict[str, int] = {}
        self._items = self._bytes = 0
        self._closed = False
        self._lock = threading.Lock()
        self._wakeups: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._held = 0  # wake-ups that found only heavy jobs held back: sent again by `done`

    def __len__(self) -> int:
        return self._items

    @property
    def queued_bytes(self) -> int:
        """The queued jobs' sizes, each counted as at least FLOOR_BYTES."""
        return self._bytes

    def put(self, job: Job[Item]) -> list[Job[Item]]:
        """Queue `job`; returns the jobs refused to stay within bounds (`job` itself, or the
        newest ones of the key holding the most bytes), to be answered at once."""
        key, weight = job.key, _weight(job)
        with self._lock:
            jobs = self._keys.get(key)
            if jobs is None:
                jobs = self._keys[key] = deque()
            jobs.append(job)
            self._bytes_by_key[key] = self._bytes_by_key.get(key, 0) + weight
            self._items, self._bytes = self._items + 1, self._bytes + weight
            refused = []
            while self._over():
                refused.append(self._pop_newest(self._heaviest(prefer=key)))
        if not refused or all(r is not job for r in refused):  # one job more for the workers
            self._wakeups.put(None)  # after the lock: the worker it wakes takes it at once
        return refused

    def get(self) -> Job[Item] | None:
        """The next job, round-robin between keys (a key whose next job is heavy is passed over
        while `max_heavy` are out), waiting for one; None once closed and empty. Each job got
        is handed back to `done` once answered."""
        while True:
            self._wakeups.get()
            with self._lock:
                key = self._next_key()
                if key is not None:
                    return self._take(key)
                if self._keys:  # only heavy ones, held back
                    self._held += 1
                elif self._closed:
                    self._wakeups.put(None)  # the next waiting worker stops too
                    return None

    def _take(self, key: str) -> Job[Item]:
        jobs = self._keys[key]
        job = jobs.popleft()
        if self._heavy(job):
            self._heavy_out += 1
        self._forget(job)
        if jobs:
            self._keys.move_to_end(key)  # its next job waits for every other key's turn
        else:
            del self._keys[key]
        return job

    def done(self, job: Job[Item]) -> None:
        """`job`, got from `get`, is answered: another heavy one may go out."""
        if self._heavy(job):
            with self._lock:
                self._heavy_out -= 1
                held, self._held = self._held, 0
            for _ in range(held):
                self._wakeups.put(None)

    def _heavy(self, job: Job[Item]) -> bool:
        return job.size >= self.heavy_bytes

    def _next_key(self) -> str | None:
        """The first key in turn whose next job may go out now."""
        if self._heavy_out < self.max_heavy:
            return next(iter(self._keys), None)
        for key, jobs in self._keys.items():
            if jobs[0].size < self.heavy_bytes:
                return key
        return None

    def close(self) -> None:
        """Once what is queued is taken, every `get`, waiting or later, returns None."""
        with self._lock:
            self._closed = True
        self._wakeups.put(None)

    def _over(self) -> bool:
        """Past a bound; one job alone is never too big (its body was read within its limit)."""
        return self._items > self.max_items or (self._bytes > self.max_bytes and self._items > 1)

    def _heaviest(self, *, prefer: str) -> str:
        """The key holding the most bytes; `prefer` (the newcomer's) on a tie."""
        most = max(self._bytes_by_key.values())
        return (
            prefer
            if self._bytes_by_key.get(prefer) == most
            else max(self._bytes_by_key, key=self._bytes_by_key.__getitem__)
        )

    def _pop_newest(self, key: str) -> Job[Item]:
        jobs = self._keys[key]
        job = jobs.pop()
        self._forget(job)
        if not jobs:
            del self._keys[key]
        return job

    def _forget(self, job: Job[Item]) -> None:
        weight = _weight(job)
        self._items, self._bytes = self._items - 1, self._bytes - weight
        left = self._bytes_by_key[job.key] - weight
        if job.key in self._keys and len(self._keys[job.key]) > 0:
            self._bytes_by_key[job.key] = left
        else:
            del self._bytes_by_key[job.key]


def _weight(job: Job[Item]) -> int:
    """What `job` counts for against the byte bound and in `_heaviest`: its size, at least
    FLOOR_BYTES (a job's bookkeeping costs room whatever its body)."""
    return max(job.size, FLOOR_BYTES)


@functools.lru_cache(maxsize=64)  # the API server sends one target; 4.5 µs a parse
def caller_timeout_s(target: str, *, default_s: float) -> float:
    """The caller's timeout from the request target's `timeout` query parameter, a Go duration
    as the API server writes it (`/mutate?timeout=10s`, `1m0s`, `500ms`), at most
    MAX_CALLER_TIMEOUT_S; `default_s` when it is absent or unreadable."""
    values = parse_qs(urlsplit(target).query).get("timeout")
    if not values:
        return default_s
    seconds = go_duration_s(values[0])
    if seconds is None or seconds <= 0:
        return default_s
    return min(seconds, MAX_CALLER_TIMEOUT_S)


def go_duration_s(text: str) -> float | None:
    """Seconds in a Go duration string (`1h2m3.5s`, `250ms`); None when it is not one."""
    if not text or len(text) > 64:
        return None
    parts = list(_GO_DURATION.finditer(text))
    if not parts or "".join(p.group(0) for p in parts) != text:
        return None
    return sum(float(p.group(1)) * _UNIT_S[p.group(2)] for p in parts)


def review_namespace(body: bytes) -> str | None:
    """The namespace named first in a review's opening bytes (request.namespace, as the API
    server writes it); None when there is none. Only a key to share the queue by: a wrong one
    costs fairness, never correctness."""
    found = _NAMESPACE.search(body, 0, NAMESPACE_WINDOW)
    return None if found is None else found.group(1).decode("utf-8", "replace")
