"""The connections of one listening socket: one selector thread moves every byte (TLS handshakes,
requests, replies) without blocking; a fixed pool of worker threads runs the handlers.

What a slow or hostile client can hold is bounded: no thread (only a socket and a buffer of at
most one request), for at most `request_timeout_s` from its first byte (or its accept) to the
end of its body, or `idle_timeout_s` between two requests. Past `max_connections` the connection
that has waited longest in its state is closed to make room. Constant-time routes (`/healthz`,
`/readyz`) are answered on the selector thread itself, so they never queue behind busy workers;
so are quick requests (an admission that needs no translation and no API call, such as a pod
without GPUs) while the turn has time left of `QUICK_BUDGET_S`: no hand-off to a worker and back.
Work that is not a review (a scrape of /metrics, /bookings) never takes a review's room: it waits
in a small queue of its own for the one side worker, shared out by client address, and a full one
refuses only such work (issue 35: bodiless GETs had filled the reviews' queue and a neighbour's
reviews were refused beside them). And a connection whose last request was not a review reads its
next one only while the loop's budget of such requests allows (`others_per_s`, a token bucket):
past it, it is parked (not read; it costs a socket) until tokens come back, so a flood of
scrapes on keep-alive connections takes the selector thread no more than that from the reviews
beside it, whatever their number. Reviews wait for a worker in a `workqueue.FairQueue`: bounded,
round-robin between the keys the routes give (a review's namespace), each with its caller's
deadline (the `timeout` query parameter); a request refused by a full queue is answered 503 at
once, one whose deadline passed in the queue 504 without being handled, and both are counted by
`shed`; one big request at a time is handed out (`workqueue.HEAVY_BYTES`), the workers taking the
others meanwhile.
Every failed connection is one structured log line, never a traceback on stderr.

Stopping has two gentle steps before `shutdown()` (issue 38: a replica that a rolling update
ends is still sent reviews until kube-proxy has seen its endpoint go, and the API server retries
no refused or broken webhook POST). `drain()`: every reply from then on carries `Connection:
close` and closes its connection, so the client's next request opens a new connection, which
the Service sends to a replica that stays; nothing else changes. `finish(within_s)`: the
connections already queued by the kernel are accepted, the listener closed, idle connections
closed; the requests in flight (being read, queued or computed) are answered, then the loop
stops, at the latest after `within_s`.
"""

from __future__ import annotations

import contextlib
import queue
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook import wire
from vgpu_bridge.webhook.wire import Head, HttpError
from vgpu_bridge.webhook.workqueue import FairQueue, Job, caller_timeout_s

log = get_logger("vgpu_bridge.webhook.connections")
LISTEN_BACKLOG = 1024
EXPIRE_EVERY_S = 0.25
READ_CHUNK = 64 * 1024
ACCEPTS_PER_WAKEUP = 64
#: selector time per turn for quick requests; past it they go to the workers like the rest
QUICK_BUDGET_S = 0.002
#: how long the selector waits for events while connections are parked (tokens come back)
PARKED_WAKE_S = 0.005


@dataclass(frozen=True, slots=True)
class Limits:
    """The server's bounds: open connections, a request's deadline, idle time, body size; and
    the workers that answer."""

    max_connections: int = 1000
    request_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    max_body_bytes: int = 3 * 2**20
    workers: int = 8
    max_queued: int = 128  # requests waiting for a worker
    max_queued_bytes: int = 32 * 2**20  # their bodies together
    max_side_queued: int = 64  # requests other than reviews waiting for the side worker
    others_per_s: float = 200.0  # requests other than reviews read per second, after a first
    others_burst: int = 50  # on each connection (a token bucket: rate and depth)


@dataclass(frozen=True, slots=True)
class Request:
    """One whole request, read within its deadline."""

    head: Head
    body: bytes
    peer: str
    client_verified: bool  # a client certificate signed by --client-ca-file was presented
    received_at: float = 0.0  # time.monotonic() when it was whole


@dataclass(frozen=True, slots=True)
class Reply:
    """What a route answers."""

    status: int
    body: bytes
    content_type: str = "text/plain"


#: the answers to work the queue sheds (the API server then applies the webhook's failurePolicy)
QUEUE_FULL = Reply(503, b"too many requests waiting for a worker; refused without waiting")
EXPIRED = Reply(504, b"not computed: the caller's timeout passed while it waited for a worker")
SIDE_FULL = Reply(503, b"too many requests other than reviews waiting; refused without waiting")


class Routes(Protocol):
    def inline(self, request: Request) -> Reply | None:
        """A reply computed in constant time on the selector thread, or None."""

    def quick(self, request: Request) -> Reply | None:
        """A reply computed in bounded time, without I/O, on the selector thread; None: `handle`
        it on a worker. Asked only while the turn's `QUICK_BUDGET_S` lasts."""

    def side(self, request: Request) -> bool:
        """Whether `handle` work is not a review: queued apart for the side worker, so that it
        never takes the room of a review, nor a review worker."""

    def handle(self, request: Request) -> Reply:
        """The reply, computed on a worker thread."""

    def queue_key(self, request: Request) -> str:
        """What the worker queue is shared out by (e.g. a review's namespace)."""


class _Connection:
    __slots__ = ("asked_other", "body_length", "buffer", "close_after", "deadline", "head",
                 "logged", "out", "parked", "peer", "phase", "sock", "verified",
                 "watching")  # fmt: skip

    def __init__(self, sock: socket.socket, peer: str, phase: str, deadline: float) -> None:
        self.sock, self.peer, self.phase, self.deadline = sock, peer, phase, deadline
        self.buffer = bytearray()
        self.head: Head | None = None
        self.body_length = 0
        self.out = b""
        self.close_after = self.logged = self.verified = False
        self.asked_other = False  # its last request was not a review
        self.parked = False  # not read until the loop's budget of such requests allows
        self.watching = 0  # selector events registered; 0 = not registered


def bind(address: tuple[str, int]) -> socket.socket:
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    return socket.create_server(address, family=family, backlog=LISTEN_BACKLOG)


class ConnectionLoop:
    """Serves `listener` until `shutdown()`; `tls` gives the context for each new connection
    (None: plain HTTP)."""

    def __init__(
        self,
        listener: socket.socket,
        *,
        routes: Routes,
        limits: Limits,
        tls: Callable[[], ssl.SSLContext] | None = None,
        clock: Callable[[], float] = time.monotonic,
        shed: Callable[[str], None] = lambda reason: None,
    ) -> None:
        self._listener, self._routes, self._limits, self._tls = listener, routes, limits, tls
        self._clock, self._shed = clock, shed
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._done: queue.SimpleQueue[tuple[_Connection, Reply]] = queue.SimpleQueue()
        self._work: FairQueue[tuple[_Connection, Request]] = FairQueue(
            max_items=limits.max_queued, max_bytes=limits.max_queued_bytes
        )
        self._side: FairQueue[tuple[_Connection, Request]] = FairQueue(
            max_items=limits.max_side_queued, max_bytes=limits.max_queued_bytes
        )
        self._conns: dict[_Connection, None] = {}  # insertion order: longest in its state first
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._next_expiry = 0.0
        self._wake_sent = False  # a wake-up byte is on its way: replies queued after it ride along
        self._quick_until = 0.0  # quick requests are answered inline until then (this turn)
        self._other_tokens = float(limits.others_burst)  # reads of requests other than reviews
        self._tokens_at = clock()
        self._parked: deque[_Connection] = deque()  # oldest first
        self._draining = False  # every reply closes its connection
        self._finish_by: float | None = None  # past it, stop even with requests in flight

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    @property
    def queued(self) -> int:
        """Requests waiting for a worker."""
        return len(self._work)

    def serve_forever(self, started: Callable[[], None] | None = None) -> None:
        """Serve until `shutdown()`; `started` is called once the workers run, before the first
        connection is looked at."""
        self._listener.setblocking(False)
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        workers = [
            threading.Thread(target=self._worker, args=(self._work,), name=f"worker-{i}",
                             daemon=True)
            for i in range(self._limits.workers)
        ]  # fmt: skip
        workers.append(threading.Thread(target=self._worker, args=(self._side,),
                                        name="side-worker", daemon=True))  # fmt: skip
        for worker in workers:
            worker.start()
        if started is not None:
            started()
        try:
            while not self._stop.is_set():
                self._turn()
        finally:
            for conn in list(self._conns):
                self._close(conn)
            self._work.close()
            self._side.close()
            self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake()
        self._stopped.wait()

    def drain(self) -> None:
        """From now on every reply closes its connection (see the module)."""
        self._draining = True
        self._wake()

    def finish(self, *, within_s: float) -> None:
        """Stop accepting, answer what is in flight (at most `within_s`), then stop; returns once
        stopped."""
        self._draining = True
        self._finish_by = self._clock() + within_s
        self._wake()
        self._stopped.wait()

    def close(self) -> None:
        self._selector.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    def _turn(self) -> None:
        events = self._selector.select(timeout=PARKED_WAKE_S if self._parked else EXPIRE_EVERY_S)
        self._quick_until = time.monotonic() + QUICK_BUDGET_S
        for key, _mask in events:
            if key.data == "accept":
                self._accept()
            elif key.data == "wake":
                self._drain_wakeups()
            else:
                self._step(key.data)
        while not self._done.empty():
            conn, reply = self._done.get_nowait()
            self._step(conn, reply)
        self._unpark()
        now = self._clock()
        if now >= self._next_expiry:
            self._next_expiry = now + EXPIRE_EVERY_S
            self._expire(now)
        if self._finish_by is not None:
            self._wind_down(now, self._finish_by)

    def _wind_down(self, now: float, finish_by: float) -> None:
        """A turn of `finish`: stop listening (once), close idle connections; stop when none is
        left or the time is up."""
        if self._listener.fileno() >= 0:
            self._accept_all()  # the kernel answered their handshakes: they are ours to serve
            self._selector.unregister(self._listener)
            self._listener.close()
            log.info("stopped accepting; finishing what is in flight", open=len(self._conns))
        for conn in [c for c in self._conns if c.phase == "idle"]:
            self._close(conn)
        if not self._conns:
            self._stop.set()
        elif now >= finish_by:
            log.warning("stopping with requests in flight", open=len(self._conns))
            self._stop.set()

    # -- accepting ------------------------------------------------------------------------

    def _accept_all(self) -> None:
        """Accept what the kernel has queued: at most a full backlog, however fast clients come."""
        for _ in range(LISTEN_BACKLOG // ACCEPTS_PER_WAKEUP + 1):
            if not self._accept():
                return

    def _accept(self) -> bool:
        """Accept up to ACCEPTS_PER_WAKEUP connections; whether more may be waiting."""
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                sock, address = self._listener.accept()
            except BlockingIOError:
                return False
            except OSError as error:  # e.g. out of file descriptors: make room, try later
                log.warning("accept failed", error=str(error))
                self._make_room()
                return False
            if len(self._conns) >= self._limits.max_connections and not self._make_room():
                sock.close()
                log.warning(
                    "connection refused", peer=_peer(address), reason="all connections busy"
                )
                continue
            try:
                self._admit(sock, _peer(address))
            except OSError as error:  # gone before we could set it up
                sock.close()
                log.warning("connection failed", peer=_peer(address), reason=_describe(error))
        return True

    def _admit(self, sock: socket.socket, peer: str) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay on replies
        deadline = self._clock() + self._limits.request_timeout_s
        if self._tls is None:
            conn = _Connection(sock, peer, "request", deadline)
        else:
            wrapped = self._tls().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            conn = _Connection(wrapped, peer, "handshake", deadline)
        self._conns[conn] = None
        self._watch(conn, selectors.EVENT_READ)

    def _make_room(self) -> bool:
        """Close the connection that has waited longest with an incomplete request (else the
        longest idle one): a flood of slow clients pushes out its own, not the API server's
        keep-alive connections. Never one a worker holds."""
        for phases in (("handshake", "request", "reply"), ("idle",)):
            for conn in self._conns:
                if conn.phase in phases:
                    self._fail(conn, f"closed to make room: {self._limits.max_connections} open")
                    return True
        return False

    # -- one step of a connection ---------------------------------------------------------

    def _step(self, conn: _Connection, reply: Reply | None = None) -> None:
        try:
            if reply is not None:
                self._reply(conn, reply)
            elif conn.phase == "handshake":
                self._handshake(conn)
            elif conn.phase == "reply":
                self._write(conn)
            else:
                self._read(conn)
            while conn.phase == "idle" and conn.buffer and not conn.parked and conn in self._conns:
                self._enter(conn, "request", self._limits.request_timeout_s)  # pipelined
                self._parse(conn)
        except HttpError as error:
            self._refuse(conn, error)
        except (ssl.SSLError, OSError) as error:
            self._fail(conn, _describe(error))
        except Exception as error:  # a bug of ours: one line with its traceback, then close
            log.exception("connection failed", peer=conn.peer, phase=conn.phase)
            self._fail(conn, f"internal error: {type(error).__name__}")

    def _handshake(self, conn: _Connection) -> None:
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        conn.verified = bool(sock.getpeercert())
        conn.phase = "request"
        self._read(conn)

    def _read(self, conn: _Connection) -> None:
        room = wire.MAX_HEAD_BYTES + self._limits.max_body_bytes + 4
        while len(conn.buffer) < room:
            try:
                chunk = conn.sock.recv(READ_CHUNK)
            except (ssl.SSLWantReadError, BlockingIOError):
                break
            if not chunk:
                self._end_of_stream(conn)
                return
            if conn.phase == "idle":  # the first byte of the next request starts its clock
                self._enter(conn, "request", self._limits.request_timeout_s)
            conn.buffer += chunk
        self._watch(conn, selectors.EVENT_READ)
        self._parse(conn)

    def _end_of_stream(self, conn: _Connection) -> None:
        if conn.phase == "idle" and not conn.buffer:
            self._close(conn)  # a client closing its keep-alive connection
        else:
            self._fail(conn, "closed by the client before its request was complete")

    def _parse(self, conn: _Connection) -> None:
        if conn.head is None:
            end = wire.head_end(conn.buffer)
            if end < 0:
                return
            conn.head = wire.parse_head(bytes(conn.buffer[: end - 4]))
            conn.body_length = wire.body_length(conn.head, limit=self._limits.max_body_bytes)
            del conn.buffer[:end]
        if len(conn.buffer) < conn.body_length:
            return
        body = bytes(conn.buffer[: conn.body_length])
        del conn.buffer[: conn.body_length]
        request = Request(conn.head, body, conn.peer, conn.verified, time.monotonic())
        conn.asked_other = self._routes.side(request)
        conn.close_after = not conn.head.keep_alive
        conn.head, conn.body_length = None, 0
        reply = self._routes.inline(request)
        if reply is None and time.monotonic() < self._quick_until:
            reply = self._routes.quick(request)
        if reply is not None:
            self._reply(conn, reply)
            return
        self._enter(conn, "busy", 0)
        self._watch(conn, 0)
        self._queue(conn, request)

    def _queue(self, conn: _Connection, request: Request) -> None:
        """Hand `request` to the workers (a review) or to the side worker (anything else); what
        the full queue refuses is answered 503 now."""
        timeout_s = caller_timeout_s(request.head.target, default_s=self._limits.request_timeout_s)
        side = conn.asked_other  # the routes' `side`, asked once the request was whole
        work = self._side if side else self._work
        key = _host(conn.peer) if side else self._routes.queue_key(request)
        reason, refusal = ("side-queue-full", SIDE_FULL) if side else ("queue-full", QUEUE_FULL)
        job = Job((conn, request), key, len(request.body), self._clock() + timeout_s)
        for refused in work.put(job):
            waiting, _ = refused.item
            self._shed(reason)
            log.warning("request refused", peer=waiting.peer, key=refused.key, reason=reason,
                        queued=len(work), queued_bytes=work.queued_bytes)  # fmt: skip
            if waiting is conn:
                self._reply(conn, refusal)  # its own step goes on with what follows
            else:
                self._step(waiting, refusal)

    def _reply(self, conn: _Connection, reply: Reply) -> None:
        conn.close_after = conn.close_after or self._draining
        conn.out = wire.response(
            reply.status, reply.body, content_type=reply.content_type, close=conn.close_after
        )
        self._enter(conn, "reply", self._limits.request_timeout_s)
        self._write(conn)

    def _write(self, conn: _Connection) -> None:
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (ssl.SSLWantWriteError, BlockingIOError):
                self._watch(conn, selectors.EVENT_WRITE)
                return
            except ssl.SSLWantReadError:
                self._watch(conn, selectors.EVENT_READ)
                return
            conn.out = conn.out[sent:]
        if conn.close_after:
            self._close(conn)
            return
        self._enter(conn, "idle", self._limits.idle_timeout_s)
        if conn.asked_other and not self._take_other_token():
            conn.parked = True
            self._watch(conn, 0)
            self._parked.append(conn)
            return
        self._watch(conn, selectors.EVENT_READ)

    def _take_other_token(self) -> bool:
        """Whether a connection that has just been answered something other than a review may
        read its next request now (a token is spent), refilled at `others_per_s`."""
        now = self._clock()
        refilled = self._other_tokens + (now - self._tokens_at) * self._limits.others_per_s
        self._other_tokens, self._tokens_at = min(float(self._limits.others_burst), refilled), now
        if self._other_tokens < 1:
            return False
        self._other_tokens -= 1
        return True

    def _unpark(self) -> None:
        """Read again, oldest first, the parked connections the budget allows now."""
        while self._parked:
            conn = self._parked[0]
            if conn in self._conns and not self._take_other_token():
                return
            self._parked.popleft()
            conn.parked = False
            if conn not in self._conns:  # closed meanwhile: no token spent
                continue
            if conn.buffer:  # a pipelined request already read starts its clock now
                self._enter(conn, "request", self._limits.request_timeout_s)
            self._watch(conn, selectors.EVENT_READ)
            self._step(conn)

    # -- failures and time limits ---------------------------------------------------------

    def _refuse(self, conn: _Connection, error: HttpError) -> None:
        """Answer `error.status` with its reason, then close; one log line."""
        self._log_failure(conn, error.reason, status=error.status)
        conn.close_after = True
        conn.buffer.clear()
        conn.head = None
        try:
            self._reply(conn, Reply(error.status, error.reason.encode()))
        except (ssl.SSLError, OSError):
            self._close(conn)

    def _fail(self, conn: _Connection, reason: str) -> None:
        self._log_failure(conn, reason)
        self._close(conn)

    def _log_failure(self, conn: _Connection, reason: str, **fields: object) -> None:
        if not conn.logged:
            conn.logged = True
            log.warning("connection failed", peer=conn.peer, phase=conn.phase, reason=reason,
                        **fields)  # fmt: skip

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._conns if c.phase != "busy" and now > c.deadline]:
            if conn.phase == "idle":
                self._close(conn)
            elif conn.phase == "request" and conn.buffer:
                self._refuse(conn, HttpError(408, _late(self._limits.request_timeout_s)))
                self._close(conn)  # the 408 was a courtesy: never wait for a slow reader
            else:
                self._fail(conn, _late(self._limits.request_timeout_s))

    def _close(self, conn: _Connection) -> None:
        """Closed; a parked one leaves the queue of parked ones when its turn comes."""
        if conn in self._conns:
            del self._conns[conn]
            self._watch(conn, 0)
            conn.sock.close()

    # -- bookkeeping ----------------------------------------------------------------------

    def _enter(self, conn: _Connection, phase: str, timeout_s: float) -> None:
        conn.phase, conn.deadline = phase, self._clock() + timeout_s
        self._conns.pop(conn, None)
        self._conns[conn] = None  # now the newest in its state

    def _watch(self, conn: _Connection, events: int) -> None:
        if events == conn.watching:
            return
        if conn.watching and events:
            self._selector.modify(conn.sock, events, conn)
        elif events:
            self._selector.register(conn.sock, events, conn)
        else:
            self._selector.unregister(conn.sock)
        conn.watching = events

    def _worker(self, work: FairQueue[tuple[_Connection, Request]]) -> None:
        while (job := work.get()) is not None:
            conn, request = job.item
            if self._clock() >= job.deadline:  # its caller has given up: not worth computing
                self._shed("expired")
                log.warning("request dropped", peer=conn.peer, key=job.key, reason="expired")
                reply = EXPIRED
            else:
                reply = self._answer(conn, request)
            work.done(job)
            self._done.put((conn, reply))
            if not self._wake_sent:  # else the selector has yet to take the queue: it sees ours
                self._wake_sent = True
                self._wake()

    def _answer(self, conn: _Connection, request: Request) -> Reply:
        try:
            return self._routes.handle(request)
        except Exception:
            log.exception("request failed", peer=conn.peer, path=request.head.path)
            return Reply(500, b"internal error")

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full: already awake; closed: shutting down
            self._wake_w.send(b"\0")

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake_r.recv(4096):
                pass
        # After the bytes are gone (a byte sent later wakes us again), before the queue is read
        # (a reply queued earlier is taken in this turn): no reply waits for the next timeout.
        self._wake_sent = False


def _peer(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def _host(peer: str) -> str:
    """A peer's address without its port: one client's connections share one key."""
    return peer.rpartition(":")[0] or peer


def _late(timeout_s: float) -> str:
    return f"request not complete within {timeout_s:g} s"


def _describe(error: OSError) -> str:
    if isinstance(error, ssl.SSLError):
        return f"TLS: {error.reason or error}"
    return f"{type(error).__name__}: {error.strerror or error}"
