"""The installed chart's webhook as a local process: started with the env of the release's
Deployment (as its pod would be; the local control plane runs no pods), and made reachable from
the API server through the release's own Service and MutatingWebhookConfiguration."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.webhook.process import free_port

CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class Release:
    namespace: str
    deployment: str
    service: str
    configuration: str

    def env(self, kube: KubeClient) -> dict[str, str]:
        """The webhook container's env, as the chart rendered it."""
        path = f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.deployment}"
        container = kube.get(path)["spec"]["template"]["spec"]["containers"][0]
        return {var["name"]: var["value"] for var in container["env"] if "value" in var}


@dataclass
class LocalWebhook:
    port: int
    process: subprocess.Popen[bytes]
    log_file: Path

    def log(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def running_release_webhook(
    kube: KubeClient, kubeconfig: Path, release: Release, workdir: Path
) -> Iterator[LocalWebhook]:
    """`vgpu-bridge webhook` with the Deployment's env; only where it listens, where it writes
    its files and how it reaches the API differ (a pod's emptyDir and token), and it stops at
    once on the test's SIGTERM (no drain: no Service routes to it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **os.environ,
        **release.env(kube),
        "VGPU_BRIDGE_LISTEN": f"127.0.0.1:{port}",
        "VGPU_BRIDGE_TLS_CERT_FILE": str(workdir / "tls.crt"),
        "VGPU_BRIDGE_TLS_KEY_FILE": str(workdir / "tls.key"),
        "VGPU_BRIDGE_KUBECONFIG": str(kubeconfig),
        "VGPU_BRIDGE_DRAIN_SECONDS": "0",  # stopped by the test, not by a roll: at once
    }
    env.pop("VGPU_BRIDGE_METRICS_LISTEN", None)
    log_file = workdir / "webhook.log"
    with log_file.open("w") as log:
        command = [sys.executable, "-m", "vgpu_bridge.cli", "webhook"]
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    webhook = LocalWebhook(port, process, log_file)
    try:
        yield webhook
    finally:
        webhook.stop()


def _service_path(release: Release) -> str:
    return f"/api/v1/namespaces/{release.namespace}/services/{release.service}"


def _set_port(kube: KubeClient, release: Release, port: int) -> None:
    hooks = kube.get(f"{CONFIGS}/{release.configuration}")["webhooks"]
    patch: Json = {
        "webhooks": [
            {"name": hook["name"], "clientConfig": {"service": {"port": port}}} for hook in hooks
        ]
    }
    kube.patch(f"{CONFIGS}/{release.configuration}", patch, content_type=STRATEGIC_MERGE)


@contextmanager
def reachable(kube: KubeClient, release: Release, port: int) -> Iterator[None]:
    """While inside: the release's Service is an ExternalName for localhost and its webhooks
    call `port`, so the API server (which has no Service network here) reaches the local
    process, still by the Service's name (`<service>.<namespace>.svc`, which the certificate
    must name); afterwards both are as the chart rendered them (so `helm upgrade` meets no
    conflict)."""
    service = kube.get(_service_path(release))
    ports = service["spec"]["ports"]
    external = {"type": "ExternalName", "externalName": "localhost", "clusterIP": None,
                "clusterIPs": None, "ipFamilies": None, "ipFamilyPolicy": None,
                "internalTrafficPolicy": None}  # fmt: skip
    kube.patch(_service_path(release), {"spec": external})
    _set_port(kube, release, port)
    try:
        yield
    finally:
        _set_port(kube, release, 443)
        cluster_ip = {"type": "ClusterIP", "externalName": None, "ports": ports}
        kube.patch(_service_path(release), {"spec": cluster_ip})
