"""Part 3 (one figure of it): how long a webhook replica takes from process start to ready, and
its memory then. The real webhook (``vgpu-bridge webhook``, started as the e2e tier starts it:
``e2e/webhook/process.py``) on the fleet's cluster; ready is its /readyz answering 200, which it
does once its cache of our driver's ResourceSlices holds the first full (paged) list. Its other
caches (claim templates, quotas) list at the same time and are not part of readiness; the
requests it made are read ``SETTLE_S`` after ready, with its RSS then.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.scaling.api_counts import Requests, counted
from bench.webhook import rss_mb
from e2e.cluster import KubeClient
from e2e.processes import stop_process
from e2e.webhook.process import WebhookProcess, free_port
from tests.tls import write_self_signed

READY_TIMEOUT_S, POLL_S, SETTLE_S = 120.0, 0.02, 2.0


@dataclass(frozen=True)
class ReplicaStart:
    ready_s: float  # process start to /readyz 200
    rss_ready_mb: float  # the replica (with its prevalidating child) when ready
    rss_settled_mb: float  # SETTLE_S later, its other caches listed too
    requests: Requests  # the API requests from start to SETTLE_S after ready


@contextmanager
def running_replica(
    kubeconfig: Path,
    workdir: Path,
    *,
    environ: Mapping[str, str] | None = None,
    listen_host: str = "127.0.0.1",
) -> Iterator[tuple[subprocess.Popen[bytes], WebhookProcess, float]]:
    """A webhook replica started with `environ` over ours, listening on `listen_host` (0.0.0.0:
    behind a Service, `e2e/webhook/service_proxy.py`), once /readyz answers 200: its process,
    its handle and the seconds from start to ready; stopped on leaving."""
    workdir.mkdir(parents=True, exist_ok=True)
    cert, key = workdir / "tls.crt", workdir / "tls.key"
    if not cert.exists():
        cert, key = write_self_signed(workdir)
    webhook = WebhookProcess(free_port(), cert, workdir / "webhook.log")
    command = [
        sys.executable, "-m", "vgpu_bridge.cli", "webhook",
        "--listen", f"{listen_host}:{webhook.port}",
        "--tls-cert-file", str(cert), "--tls-key-file", str(key),
        "--kubeconfig", str(kubeconfig),
    ]  # fmt: skip
    with webhook.log_file.open("w") as log:
        started = time.monotonic()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                                   env={**os.environ, **(environ or {})})  # fmt: skip
    try:
        while not webhook.ready():
            if process.poll() is not None or time.monotonic() - started > READY_TIMEOUT_S:
                raise RuntimeError(f"the webhook did not get ready: {webhook.log()[-2000:]}")
            time.sleep(POLL_S)
        yield process, webhook, time.monotonic() - started
    finally:
        stop_process(process)


def start_replica(kube: KubeClient, kubeconfig: Path, workdir: Path) -> ReplicaStart:
    """Start one replica, time it to ready, stop it."""

    def start_and_wait() -> tuple[float, float, float]:
        with running_replica(kubeconfig, workdir) as (process, _, ready_s):
            at_ready = rss_mb(process.pid)
            time.sleep(SETTLE_S)
            return ready_s, at_ready, rss_mb(process.pid)

    (ready_s, at_ready, settled), requests = counted(kube, start_and_wait)
    return ReplicaStart(ready_s, at_ready, settled, requests)
