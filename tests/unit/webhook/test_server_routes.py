"""What the webhook's routes answer on the selector thread and what they leave to a worker (issue
35): a client without the required certificate, an unknown path, a wrong method and a review
without a body are answered at once and never take queue room; /metrics and /bookings go to the
side worker, never to the reviews' queue; the plain listener has no /bookings; /metrics made for a
scrape is never older than the scrape."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.tls import write_self_signed
from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over
from vgpu_bridge.core import DEFAULT, Inventory
from vgpu_bridge.core.dialects import hami
from vgpu_bridge.webhook import server
from vgpu_bridge.webhook.claim_bookings import ClaimBookings
from vgpu_bridge.webhook.connections import Request
from vgpu_bridge.webhook.quotas import QuotaCache, QuotaGate
from vgpu_bridge.webhook.server import AdmissionRoutes, ProbeRoutes, TLSFiles
from vgpu_bridge.webhook.wire import Head


def routes(recorded: RecordingApi, tmp_path: Path, *, client_ca: bool) -> AdmissionRoutes:
    cert, key = write_self_signed(tmp_path)
    tls = TLSFiles(str(cert), str(key), client_ca_file=str(cert) if client_ca else None)
    return AdmissionRoutes(admitter_over(recorded), lambda: True, tls=tls)


def asked(
    method: str, target: str, body: bytes = b"", *, verified: bool = False, at: float = 0.0
) -> Request:
    return Request(Head(method, target, "HTTP/1.1"), body, "10.0.0.7:4242", verified, at)


@pytest.mark.parametrize(
    ("method", "target", "body"),
    [
        ("POST", "/mutate", b"{}"),
        ("GET", "/metrics", b""),
        ("GET", "/bookings", b""),
        ("GET", "/nothing", b""),
        ("DELETE", "/mutate", b""),
    ],
)
def test_without_the_required_client_certificate_the_refusal_is_answered_inline(
    recorded: RecordingApi, tmp_path: Path, method: str, target: str, body: bytes
) -> None:
    """Issue 35: the certificate was checked by the worker, after the request took queue room."""
    reply = routes(recorded, tmp_path, client_ca=True).inline(asked(method, target, body))
    assert reply is not None
    assert reply.status == 403


def test_the_probes_stay_open_to_clients_without_a_certificate(
    recorded: RecordingApi, tmp_path: Path
) -> None:
    guarded = routes(recorded, tmp_path, client_ca=True)
    for path in ("/healthz", "/readyz"):
        reply = guarded.inline(asked("GET", path))
        assert reply is not None
        assert reply.status == 200


@pytest.mark.parametrize(
    ("method", "target", "body", "status"),
    [
        ("GET", "/nothing", b"", 404),
        ("POST", "/nothing", b"{}", 404),
        ("GET", "/mutate", b"", 404),
        ("PUT", "/metrics", b"x", 404),
        ("POST", "/mutate", b"", 400),
        ("POST", "/mutate?timeout=10s", b"", 400),
    ],
)
def test_requests_that_are_no_work_are_answered_inline(
    recorded: RecordingApi, tmp_path: Path, method: str, target: str, body: bytes, status: int
) -> None:
    for client_ca in (False, True):
        reply = routes(recorded, tmp_path, client_ca=client_ca).inline(
            asked(method, target, body, verified=True)
        )
        assert reply is not None
        assert reply.status == status


def test_metrics_and_bookings_go_to_the_side_worker_reviews_to_the_queue(
    recorded: RecordingApi, tmp_path: Path
) -> None:
    open_routes = routes(recorded, tmp_path, client_ca=False)
    assert open_routes.inline(asked("GET", "/metrics")) is None
    assert open_routes.side(asked("GET", "/metrics"))
    assert open_routes.side(asked("GET", "/bookings"))
    assert not open_routes.side(asked("POST", "/mutate", b"{}"))


def test_the_plain_listener_serves_no_bookings(recorded: RecordingApi) -> None:
    """Issue 35 item 8: it answered /bookings with no check at all."""
    plain = ProbeRoutes(admitter_over(recorded), lambda: True)
    reply = plain.inline(asked("GET", "/bookings"))
    assert reply is not None
    assert reply.status == 404


def test_a_scrape_gets_metrics_made_after_it_arrived(
    recorded: RecordingApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scrapes arriving together share one body; a later scrape never gets an older one."""
    monkeypatch.setattr(server, "METRICS_EVERY_S", 0.0)
    open_routes = routes(recorded, tmp_path, client_ca=False)
    first = open_routes.handle(asked("GET", "/metrics", at=time.monotonic()))
    assert b"vgpu_bridge_requests_shed_total{" not in first.body
    open_routes.admitter.metrics.shed.labels("queue-full").inc()
    again = open_routes.handle(asked("GET", "/metrics", at=time.monotonic()))
    assert b'vgpu_bridge_requests_shed_total{reason="queue-full"} 1.0' in again.body
    earlier = open_routes.handle(asked("GET", "/metrics", at=0.0))
    assert earlier.body == again.body  # one made after it arrived: made again for no one


def test_the_bookings_document_names_no_namespace_claim_or_pod(
    recorded: RecordingApi, tmp_path: Path
) -> None:
    """Why /bookings may answer without a client CA: per-card sums only (node, device, memory,
    cores, shares), like the metrics' counts; no tenant's names."""
    result = {"request": "gpu", "driver": "gpu.vgpu-bridge.io", "pool": "node-a",
              "device": "gpu-1", "consumedCapacity": {"memory": "10Gi", "cores": "30"}}  # fmt: skip
    claim = {
        "metadata": {"namespace": "secret-team", "name": "secret-claim", "uid": "uid-of-claim"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.vgpu-bridge.io"}}]}},
        "status": {"allocation": {"devices": {"results": [result]}},
                   "reservedFor": [{"resource": "pods", "name": "secret-pod",
                                    "uid": "uid-of-pod"}]},
    }  # fmt: skip
    claims = ClaimBookings(recorded.api, profile=DEFAULT)
    cache = QuotaCache(recorded.api, names=hami.RESOURCES)
    gate = QuotaGate(api=recorded.api, cache=cache, profile=DEFAULT, names=hami.RESOURCES,
                     inventory=Inventory, memory_factor=1, claims=claims)  # fmt: skip
    admitter = admitter_over(recorded, quotas=gate)
    claims.replace([])
    claims.apply("ADDED", claim)
    tls = routes(recorded, tmp_path, client_ca=False).tls
    reply = AdmissionRoutes(admitter, lambda: True, tls=tls).handle(asked("GET", "/bookings"))
    assert reply.status == 200
    assert json.loads(reply.body)["cards"][0]["device"] == "gpu-1"
    for name in (b"secret-team", b"secret-claim", b"secret-pod", b"uid-of-claim", b"uid-of-pod"):
        assert name not in reply.body
