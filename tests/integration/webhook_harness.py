"""A real webhook server on a loopback port over real TLS, and a client that speaks to it."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.tls import write_self_signed
from vgpu_bridge.core import Inventory
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.app import build, listen, tls_files
from vgpu_bridge.webhook.server import ProbeServer, WebhookServer
from vgpu_bridge.webhook.settings import Settings

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p"},
    "spec": {"containers": [{"name": "main", "image": "cuda", "resources": {"limits": {
        "nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}}}]},
}  # fmt: skip
# A dry-run review of one GPU pod: translated, and nothing is written.
REVIEW = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "team-a",
            "object": POD,
            "dryRun": True,
        },
    }
).encode()

INVENTORY = Inventory({"gpu.vgpu-bridge.io": frozenset({40 * 2**30, 80 * 2**30})})


def unreachable_api() -> KubeApi:
    """An API client that fails fast: these tests admit only what needs no API call."""
    configuration = client.Configuration()
    configuration.host = "https://127.0.0.1:1"
    return KubeApi(client.ApiClient(configuration), timeout_s=0.5)


@dataclass
class RunningWebhook:
    server: WebhookServer
    cert_file: Path
    key_file: Path
    ready: threading.Event
    probes: ProbeServer | None = None  # the plain-HTTP server, with `metrics_listen`

    @property
    def admitter(self) -> Admitter:
        return self.server.admitter

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def connection(self) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(self.cert_file))
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=10)

    def post(self, body: bytes, path: str = "/mutate") -> tuple[int, bytes]:
        conn = self.connection()
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def get(self, path: str) -> tuple[int, bytes]:
        conn = self.connection()
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def plain(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """A request to the plain-HTTP server, without TLS."""
        assert self.probes is not None, "started without metrics_listen"
        conn = http.client.HTTPConnection("127.0.0.1", self.probes.server_address[1], timeout=10)
        try:
            conn.request(method, path, body=body)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def review(self, request: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        status, data = self.post(json.dumps(body).encode())
        assert status == 200, data
        response: dict[str, Any] = json.loads(data)["response"]
        return response


@contextmanager
def running_webhook(directory: Path, **settings: Any) -> Iterator[RunningWebhook]:
    cert_file, key_file = write_self_signed(directory)
    config = Settings(
        listen="127.0.0.1:0", tls_cert_file=str(cert_file), tls_key_file=str(key_file), **settings
    )
    admitter, _inventory, _sweeper = build(config, unreachable_api())
    admitter.inventory = lambda: INVENTORY
    ready = threading.Event()
    tls = tls_files(config)
    server, probes = listen(config, admitter, tls=tls, ready=ready.is_set)
    servers = [server] if probes is None else [server, probes]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    try:
        yield RunningWebhook(server, cert_file, key_file, ready, probes)
    finally:
        for running, thread in zip(servers, threads, strict=True):
            running.shutdown()
            running.server_close()
            thread.join(timeout=5)


# A kubeconfig whose API server does not answer: the process admits what needs no API call.
NOWHERE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


@dataclass
class WebhookProcess:
    """`vgpu-bridge webhook` as its own process; everything it prints goes to `output`."""

    port: int
    cert_file: Path
    output: Path
    process: subprocess.Popen[bytes]

    def connection(self, *, timeout_s: float = 10) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(self.cert_file))
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=context, timeout=timeout_s
        )

    def lines(self) -> list[str]:
        return self.output.read_text().splitlines()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def answers_health(webhook: WebhookProcess) -> bool:
    conn = webhook.connection(timeout_s=2)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


@contextmanager
def webhook_process(
    directory: Path, *args: str, kubeconfig: Path | None = None, require_alive: bool = True
) -> Iterator[WebhookProcess]:
    """Start the binary on a free loopback port and wait until /healthz answers (or it exits).

    `kubeconfig`: the file to pass (default: one whose API server does not answer).
    `require_alive`: fail at once if the process exited before answering; a test that expects
    it to exit passes False and looks at `process` and `lines()` itself."""
    cert_file, key_file = write_self_signed(directory)
    if kubeconfig is None:
        kubeconfig = directory / "kubeconfig"
        kubeconfig.write_text(NOWHERE_KUBECONFIG)
    port = free_port()
    command = [
        sys.executable, "-m", "vgpu_bridge.cli", "webhook", "--listen", f"127.0.0.1:{port}",
        "--tls-cert-file", str(cert_file), "--tls-key-file", str(key_file),
        "--kubeconfig", str(kubeconfig), *args,
    ]  # fmt: skip
    output = directory / "webhook.log"
    with output.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    running = WebhookProcess(port, cert_file, output, process)
    try:
        for _ in range(600):
            if process.poll() is not None or answers_health(running):
                break
            time.sleep(0.1)
        if require_alive:
            assert process.poll() is None, running.output.read_text()
        yield running
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
