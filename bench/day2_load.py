"""Open-loop GPU pod creates for the day-two scenarios (issue 38, ``bench/day2.py``).

A create is scheduled every ``1/rate`` seconds whatever happened to the ones before (so an
outage shows as refused or late creates, not as a slower generator), spread over several
namespaces, and sent by a pool of threads, each create once: no retry of ours hides a refusal
(``KubeApi`` retries 5xx; this does not). Each outcome is kept with its time:

- ``created``: 201;
- ``refused``: the API server could not get an answer from the webhook (``failurePolicy: Fail``:
  ``failed calling webhook``, connection refused, no endpoints, TLS);
- ``timed out``: the webhook call hit its timeout (``context deadline exceeded``), or our own
  client timeout passed;
- ``denied``: the webhook answered no (never expected here: the pods are valid);
- ``apiserver down``: the API server itself could not be reached;
- ``other``: anything else (the status is kept).

The pods are cheap: a nodeSelector nothing matches keeps them Pending, and each is deleted
(grace 0) right after it is created, so the cluster never holds more than a few hundred.
``python bench/day2_load.py --self-test`` prints the generator's own ceiling on this machine
(against a local HTTP stub answering 201 at once).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Json = dict[str, Any]
CREATED, REFUSED, TIMED_OUT, DENIED, APISERVER_DOWN, OTHER = (
    "created",
    "refused",
    "timed out",
    "denied",
    "apiserver down",
    "other",
)
OUTCOMES = (CREATED, REFUSED, TIMED_OUT, DENIED, APISERVER_DOWN, OTHER)
NOWHERE = {"vgpu-bridge.io/day2-load": "nowhere"}  # no node has it: the pods stay Pending
#: what the API server says when a call ran out of time (not the URL's own ``?timeout=10s``)
TIMEOUT_SIGNS = ("deadline exceeded", "client.timeout", "i/o timeout", "timed out")
CLIENT_TIMEOUT_S = 40.0  # past the webhook's own timeout (at most 30 s) and the API server's


@dataclass(frozen=True)
class Outcome:
    """One create: when it was due (seconds since the start), how long it took, what came of it."""

    due_s: float
    took_s: float
    outcome: str
    detail: str = ""


def classify(status: int, body: str) -> tuple[str, str]:
    """The outcome of an API answer (status, body) and a short detail."""
    if status == 201:
        return CREATED, ""
    message = body
    with suppress(ValueError, AttributeError):
        message = str(json.loads(body).get("message", body))
    lowered = message.lower()
    timed_out = any(sign in lowered for sign in TIMEOUT_SIGNS)
    if "failed calling webhook" in lowered or "failed to call webhook" in lowered:
        return (TIMED_OUT if timed_out else REFUSED), message[:300]
    if "denied the request" in lowered:
        return DENIED, message[:300]
    if status == 504 or timed_out:
        return TIMED_OUT, message[:300]
    return OTHER, f"{status}: {message[:300]}"


def gpu_pod(name: str) -> Json:
    """A HAMi-style share request that never runs (nodeSelector matches nothing)."""
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 10}
    container = {
        "name": "main",
        "image": "ubuntu:24.04",
        "imagePullPolicy": "Never",
        "command": ["sleep", "infinity"],
        "resources": {"limits": limits},
    }
    spec = {"terminationGracePeriodSeconds": 0, "nodeSelector": NOWHERE, "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


class RawApi:
    """One request, one answer: the kubeconfig's client without any retry, so a refusal is
    counted as it happened."""

    def __init__(self, kubeconfig: str, pool_size: int = 64) -> None:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
        configuration.connection_pool_maxsize = pool_size
        self._client = client.ApiClient(configuration)

    def send(self, method: str, path: str, body: Json | None = None) -> tuple[int, str]:
        """(status, body) of one request; OSError-like failures raise."""
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        _, url, headers, payload = self._client.param_serialize(
            method=method,
            resource_path=path,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )[:4]
        response = self._client.rest_client.request(  # type: ignore[no-untyped-call]
            method, url, headers=headers, body=payload, _request_timeout=CLIENT_TIMEOUT_S
        )
        data: bytes = response.read() or b""
        return int(response.status), data.decode(errors="replace")


def create_once(api: RawApi, namespace: str, name: str) -> tuple[str, str]:
    """Create one pod (and delete it again at once when it was created); its outcome."""
    try:
        status, body = api.send("POST", f"/api/v1/namespaces/{namespace}/pods", gpu_pod(name))
    except Exception as error:
        text = f"{type(error).__name__}: {error}"
        if "timed out" in text.lower() or "timeout" in type(error).__name__.lower():
            return TIMED_OUT, text[:300]
        return APISERVER_DOWN, text[:300]
    outcome = classify(status, body)
    if outcome[0] == CREATED:
        _delete_quietly(api, namespace, name)
    return outcome


def _delete_quietly(api: RawApi, namespace: str, name: str) -> None:
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    with suppress(Exception):
        api.send("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)


@dataclass
class Load:
    """An open-loop create stream: ``start()``, the scenario, ``stop()``; ``outcomes`` sorted by
    when each was due."""

    send: Callable[[str, str], tuple[str, str]]
    namespaces: list[str]
    rate: float = 20.0
    threads: int = 48
    outcomes: list[Outcome] = field(default_factory=list)
    late_s: list[float] = field(default_factory=list)  # how late each create left the queue
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    started_at: float = 0.0

    def start(self) -> None:
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="day2-load", daemon=True)
        self._thread.start()

    def stop(self) -> list[Outcome]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            return sorted(self.outcomes, key=lambda o: o.due_s)

    def now_s(self) -> float:
        """Seconds since ``start()``, on the outcomes' clock."""
        return time.monotonic() - self.started_at

    def _run(self) -> None:
        interval = 1.0 / self.rate
        with ThreadPoolExecutor(self.threads, thread_name_prefix="day2-create") as pool:
            index = 0
            while not self._stop.is_set():
                due = self.started_at + index * interval
                wait = due - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    break
                namespace = self.namespaces[index % len(self.namespaces)]
                pool.submit(self._one, namespace, f"load-{index}", due)
                index += 1

    def _one(self, namespace: str, name: str, due: float) -> None:
        began = time.monotonic()
        outcome, detail = self.send(namespace, name)
        ended = time.monotonic()
        record = Outcome(round(due - self.started_at, 3), round(ended - due, 3), outcome, detail)
        with self._lock:
            self.outcomes.append(record)
            self.late_s.append(began - due)


def counts(outcomes: list[Outcome], since_s: float = 0.0, until_s: float = 1e12) -> Counter[str]:
    """How many of each outcome among creates due in [since_s, until_s)."""
    return Counter(o.outcome for o in outcomes if since_s <= o.due_s < until_s)


def first_details(outcomes: list[Outcome], limit: int = 3) -> list[str]:
    """A few distinct messages of the creates that did not succeed."""
    seen: list[str] = []
    for item in outcomes:
        if item.outcome != CREATED and item.detail and item.detail not in seen:
            seen.append(item.detail)
            if len(seen) == limit:
                break
    return seen


@contextmanager
def running(load: Load) -> Iterator[Load]:
    load.start()
    try:
        yield load
    finally:
        load.stop()


# --- the generator's own ceiling ----------------------------------------------------------------


class _Created(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer()

    def do_DELETE(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer()

    def _answer(self) -> None:
        self.send_response(201)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: Any) -> None:
        pass


def self_test(rate: float, seconds: float) -> dict[str, float]:
    """The generator against a local stub that answers 201 at once: creates per second reached
    and how late creates left the queue (p99), over plain HTTP through the same client code."""
    import urllib3

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Created)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    http = urllib3.PoolManager(maxsize=64)
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def send(namespace: str, name: str) -> tuple[str, str]:
        body = json.dumps(gpu_pod(name)).encode()
        response = http.request("POST", f"{base}/api/v1/namespaces/{namespace}/pods", body=body)
        status = classify(response.status, response.data.decode())
        if status[0] == CREATED:
            http.request("DELETE", f"{base}/api/v1/namespaces/{namespace}/pods/{name}", body=b"{}")
        return status

    load = Load(send, ["a", "b", "c"], rate=rate)
    with running(load):
        time.sleep(seconds)
    outcomes = load.stop()
    server.shutdown()
    done = sum(1 for o in outcomes if o.outcome == CREATED)
    late = sorted(load.late_s)
    return {
        "asked_per_s": rate,
        "created_per_s": round(done / seconds, 1),
        "late_p99_ms": round(1000 * late[int(0.99 * (len(late) - 1))], 1) if late else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if not args.self_test:
        parser.error("run by bench/day2.py; alone only --self-test")
    for rate in (args.rate, 10 * args.rate, 50 * args.rate):
        print(json.dumps(self_test(rate, args.seconds)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
