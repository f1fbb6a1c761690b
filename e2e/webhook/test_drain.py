"""A draining webhook against the real API server (issue 38, scenario 1): once SIGTERM arrives the
replica is not ready (HTTPS and plain-HTTP /readyz) while the API server's reviews still reach it
and are answered; its `Connection: close` replies end the API server's kept-alive connections,
and the API server's next review opens a new one without a failed create; a second signal ends
the drain and the process exits 0. The tests/integration drain tests cover the rest (the exit
after the drain, a request in flight, no drain)."""

from __future__ import annotations

import http.client
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.cluster import KubeClient, LocalCluster
from e2e.webhook.helpers import create_pod, gpu_pod, serve_namespace
from e2e.webhook.process import CONFIGS, configuration, free_port
from e2e.webhook.process import WebhookProcess as Registered
from tests.integration.webhook_harness import WebhookProcess, webhook_process

pytestmark = pytest.mark.e2e
LABEL = "e2e.vgpu-bridge.io/drain"


def readyz(webhook: WebhookProcess, metrics_port: int) -> tuple[int, int]:
    """/readyz over HTTPS and over the plain-HTTP listener."""
    statuses = []
    for conn in (
        webhook.connection(),
        http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=10),
    ):
        conn.request("GET", "/readyz")
        statuses.append(conn.getresponse().status)
        conn.close()
    return statuses[0], statuses[1]


def translated(kube: KubeClient, namespace: str, name: str) -> bool:
    pod = create_pod(kube, namespace, gpu_pod(name, {"nvidia.com/gpu": 1}), dry_run=True)
    return "resourceClaims" in pod["spec"]


def wait_until_logged(webhook: WebhookProcess, event: str) -> None:
    deadline = time.monotonic() + 60
    while not any(f'"{event}"' in line for line in webhook.lines()):
        assert time.monotonic() < deadline, webhook.lines()
        time.sleep(0.05)


@pytest.fixture
def draining_webhook(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, tmp_path: Path
) -> Iterator[tuple[WebhookProcess, int]]:
    """The webhook with a long drain, ready, registered for `namespace`; its metrics port."""
    metrics_port = free_port()
    flags = ("--drain-seconds", "300", "--metrics-listen", f"127.0.0.1:{metrics_port}")
    with webhook_process(tmp_path, *flags, kubeconfig=e2e_cluster.kubeconfig) as webhook:
        deadline = time.monotonic() + 60
        while readyz(webhook, metrics_port) != (200, 200):
            assert time.monotonic() < deadline, webhook.lines()
            time.sleep(0.1)
        name = f"gpu-sharing-e2e-drain-{webhook.port}"
        registered = Registered(webhook.port, webhook.cert_file, webhook.output)
        kube.create(CONFIGS, configuration(name, registered, namespace_label=LABEL))
        try:
            serve_namespace(kube, namespace, LABEL)
            yield webhook, metrics_port
        finally:
            kube.delete(f"{CONFIGS}/{name}")


def test_a_draining_replica_is_not_ready_and_still_answers_the_api_servers_reviews(
    kube: KubeClient, namespace: str, draining_webhook: tuple[WebhookProcess, int]
) -> None:
    webhook, metrics_port = draining_webhook
    assert translated(kube, namespace, "before")  # the API server keeps this connection alive
    webhook.process.send_signal(signal.SIGTERM)
    wait_until_logged(webhook, "draining")
    assert readyz(webhook, metrics_port) == (503, 503)
    for index in range(3):  # each reply closes its connection: the next one opens a new one
        assert translated(kube, namespace, f"during-{index}")
    webhook.process.send_signal(signal.SIGTERM)  # a second signal ends the drain
    assert webhook.process.wait(timeout=60) == 0, webhook.lines()
