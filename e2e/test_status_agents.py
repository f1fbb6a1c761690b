"""`kubectl vgpu status` asks for live usage only the agents of the release namespace (issue 35),
on the real API server and its pod proxy: a cluster admin's view with a tenant's pod carrying
the agents' labels and serving made-up usage. Each stand-in agent is a Running pod whose address
is this machine's, where a small HTTP server answers /metrics and records who asked; the release
namespace is the one our MutatingWebhookConfiguration's Service lives in, or `--agent-namespace`.
"""

from __future__ import annotations

import http.server
import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.nodes import create_fake_node
from e2e.webhook.service_proxy import outward_ipv4
from vgpu_bridge.status.command import AGENT_SELECTOR
from vgpu_bridge.status.release import WEBHOOK_CONFIGURATIONS

pytestmark = pytest.mark.e2e
Json = dict[str, Any]
PLUGIN = os.path.join(os.path.dirname(sys.executable), "kubectl-vgpu")
AGENT_LABELS = dict(label.split("=") for label in AGENT_SELECTOR.split(","))
OURS = {"app.kubernetes.io/name": "vgpu-bridge"}


@dataclass
class MetricsServer:
    """GET /metrics answered with `text` on every address of this machine; each path asked kept."""

    text: str
    port: int = 0
    asked: list[str] = field(default_factory=list)


@contextmanager
def serving(text: str) -> Iterator[MetricsServer]:
    served = MetricsServer(text)

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.asked.append(self.path)
            data = served.text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads `served.asked`."""

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Answer)
    served.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def card_metrics(node: str, uuid: str) -> str:
    return (
        "# TYPE vgpu_bridge_gpu_memory_bytes gauge\n"
        f'vgpu_bridge_gpu_memory_bytes{{device="gpu-0",node="{node}",product="H100",'
        f'uuid="{uuid}"}} 8.589934592e+10\n'
    )


def stand_in_agent(kube: KubeClient, namespace: str, node: str, port: int) -> None:
    """A Running pod with the agents' labels on `node`, whose /metrics port is `port` here."""
    pods = f"/api/v1/namespaces/{namespace}/pods"
    kube.create(pods, {"metadata": {"name": "vgpu-bridge-agent", "labels": AGENT_LABELS},
                       "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                                "containers": [{"name": "agent", "image": "none", "ports": [
                                    {"name": "metrics", "containerPort": port}]}]}})  # fmt: skip
    address = outward_ipv4()
    kube.patch(f"{pods}/vgpu-bridge-agent/status", {"status": {
        "phase": "Running", "podIP": address, "podIPs": [{"ip": address}]}})  # fmt: skip


def view(kube: KubeClient, cluster: LocalCluster, *args: str) -> Json:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    done = subprocess.run([PLUGIN, "status", "-A", "-o", "json", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    document: Json = json.loads(done.stdout)
    return document


@pytest.fixture
def node(kube: KubeClient) -> Iterator[str]:
    name = f"status-agents-{secrets.token_hex(3)}"
    create_fake_node(kube, name)
    yield name
    kube.delete(f"/api/v1/nodes/{name}")


@pytest.fixture
def tenant(kube: KubeClient) -> Iterator[str]:
    name = f"status-tenant-{secrets.token_hex(3)}"
    kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    for pod in kube.items(f"/api/v1/namespaces/{name}/pods"):
        kube.delete(f"/api/v1/namespaces/{name}/pods/{pod['metadata']['name']}", grace_period_s=0)
    kube.delete(f"/api/v1/namespaces/{name}")


@contextmanager
def our_configuration(kube: KubeClient, release: str) -> Iterator[None]:
    """A MutatingWebhookConfiguration of ours (no rules: it admits nothing) whose webhook calls
    the Service `vgpu-bridge-webhook` of `release`, as the chart's does."""
    name = f"{release}-status"
    kube.create(WEBHOOK_CONFIGURATIONS, {"metadata": {"name": name, "labels": OURS}, "webhooks": [
        {"name": "status.vgpu-bridge.io", "rules": [], "admissionReviewVersions": ["v1"],
         "sideEffects": "None", "failurePolicy": "Ignore", "clientConfig": {"service": {
             "namespace": release, "name": "vgpu-bridge-webhook"}}}]})  # fmt: skip
    try:
        yield
    finally:
        kube.delete(f"{WEBHOOK_CONFIGURATIONS}/{name}")


def test_only_the_release_namespaces_agents_are_asked_never_a_tenants_lookalike(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, tenant: str, node: str
) -> None:
    release = namespace
    with (
        serving(card_metrics(node, "GPU-real")) as real,
        serving(card_metrics(node, "GPU-made-up")) as lookalike,
    ):
        stand_in_agent(kube, release, node, real.port)
        stand_in_agent(kube, tenant, node, lookalike.port)
        with our_configuration(kube, release):
            found = view(kube, e2e_cluster)
        assert real.asked == ["/metrics"]  # through the API server's pod proxy
        assert lookalike.asked == []
        assert not [note for note in found["notes"] if note.startswith("the agents' metrics")]

        real.asked.clear()
        found = view(kube, e2e_cluster)  # no configuration of ours: no agent asked, told why
        assert (real.asked, lookalike.asked) == ([], [])
        assert any(note.endswith("name it with --agent-namespace") for note in found["notes"])

        view(kube, e2e_cluster, "--agent-namespace", release)
        assert (real.asked, lookalike.asked) == (["/metrics"], [])
