"""The self-managed certificate while the webhook's Deployment rolls (issue 38, scenario 1),
with real `vgpu-bridge webhook` processes against the real API server: a replica that starts
while others serve writes neither the Secret nor any caBundle (nothing the API server trusts
changes under the replicas already serving), also when the Secret was written by the previous
release (an owner reference without the fields this one writes); and two replicas that start
together, with no Secret yet, serve one certificate that every caBundle trusts (the Secret's
`create` is the lock). So no replica is untrusted for a moment during a roll."""

from __future__ import annotations

import base64
import datetime
import http.client
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509

from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.client import Json
from e2e.processes import stop_process
from e2e.webhook.process import free_port
from vgpu_bridge.webhook import certificates
from vgpu_bridge.webhook.cert_keeper import LABELS

pytestmark = pytest.mark.e2e

CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
SECRET = "webhook-cert"
SERVICE = "webhook"
HOOK_NAMES = ("pods.vgpu-bridge.io", "workloads.vgpu-bridge.io")


def entry(name: str, namespace: str) -> Json:
    """A webhook entry as the chart renders it (a Service, no caBundle) that no namespace
    matches: the rest of the session is left alone."""
    return {
        "name": name,
        "clientConfig": {"service": {"name": SERVICE, "namespace": namespace, "path": "/mutate"}},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["pods"]}],
        "namespaceSelector": {"matchLabels": {"e2e.vgpu-bridge.io/never": "true"}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }  # fmt: skip


@pytest.fixture
def configuration(kube: KubeClient, namespace: str) -> Iterator[str]:
    name = f"roll-certificate-{namespace[-6:]}"  # a DNS label: the namespace's random suffix
    body = {"metadata": {"name": name}, "webhooks": [entry(n, namespace) for n in HOOK_NAMES]}
    kube.create(CONFIGS, body)
    yield name
    kube.delete(f"{CONFIGS}/{name}")


@dataclass(frozen=True)
class Place:
    """Where the replicas run: the API, their namespace and configuration."""

    kubeconfig: Path
    namespace: str
    configuration: str


@pytest.fixture
def place(e2e_cluster: LocalCluster, namespace: str, configuration: str) -> Place:
    return Place(e2e_cluster.kubeconfig, namespace, configuration)


@dataclass(frozen=True)
class Replica:
    port: int
    log_file: Path
    process: subprocess.Popen[bytes]

    def served_certificate(self) -> x509.Certificate:
        """The certificate its TLS handshake presents (not verified here: compared below)."""
        pem = ssl.get_server_certificate(("127.0.0.1", self.port), timeout=10)
        return x509.load_pem_x509_certificate(pem.encode())

    def answers(self) -> bool:
        context = ssl._create_unverified_context()  # its certificate is what the test checks
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=2)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()


def start_replica(workdir: Path, place: Place) -> Replica:
    """One replica as the chart's Deployment runs it in tls.mode self-managed: its own
    emptyDir for the pair, the shared Secret and configuration."""
    workdir.mkdir(parents=True)
    port = free_port()
    env = {
        **os.environ,
        "VGPU_BRIDGE_LISTEN": f"127.0.0.1:{port}",
        "VGPU_BRIDGE_NAMESPACE": place.namespace,
        "VGPU_BRIDGE_TLS_SECRET": SECRET,
        "VGPU_BRIDGE_TLS_WEBHOOK_CONFIGURATION": place.configuration,
        "VGPU_BRIDGE_TLS_SERVICE": SERVICE,
        "VGPU_BRIDGE_TLS_CERT_FILE": str(workdir / "tls.crt"),
        "VGPU_BRIDGE_TLS_KEY_FILE": str(workdir / "tls.key"),
        "VGPU_BRIDGE_KUBECONFIG": str(place.kubeconfig),
    }
    log_file = workdir / "webhook.log"
    with log_file.open("wb") as log:
        command = [sys.executable, "-m", "vgpu_bridge.cli", "webhook"]
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    return Replica(port, log_file, process)


def wait_serving(replica: Replica) -> None:
    deadline = time.monotonic() + 90
    while not replica.answers():
        assert replica.process.poll() is None, replica.log_file.read_text()
        assert time.monotonic() < deadline, replica.log_file.read_text()
        time.sleep(0.1)


@contextmanager
def replicas(tmp_path: Path, names: list[str], place: Place) -> Iterator[list[Replica]]:
    """Start every replica named, all at once, and wait until each serves."""
    with ExitStack() as stack:
        started = []
        for name in names:
            replica = start_replica(tmp_path / name, place)
            stack.callback(stop_process, replica.process)
            started.append(replica)
        for replica in started:
            wait_serving(replica)
        yield started


def secret_of(kube: KubeClient, namespace: str) -> Json:
    return kube.get(f"/api/v1/namespaces/{namespace}/secrets/{SECRET}")


def bundles(kube: KubeClient, configuration: str) -> list[bytes]:
    hooks = kube.get(f"{CONFIGS}/{configuration}")["webhooks"]
    return [base64.b64decode(hook["clientConfig"].get("caBundle") or "") for hook in hooks]


def versions(kube: KubeClient, namespace: str, configuration: str) -> tuple[str, str]:
    """The resourceVersions of the Secret and the configuration: any write changes them."""
    secret = secret_of(kube, namespace)["metadata"]["resourceVersion"]
    return secret, kube.get(f"{CONFIGS}/{configuration}")["metadata"]["resourceVersion"]


def trusted_by_every_bundle(cert: x509.Certificate, kube: KubeClient, configuration: str) -> bool:
    pem = cert.public_bytes(certificates.PEM)
    return all(certificates.trusted_by(pem, bundle) for bundle in bundles(kube, configuration))


def test_a_replica_starting_mid_roll_writes_neither_the_secret_nor_a_ca_bundle(
    kube: KubeClient, place: Place, namespace: str, configuration: str, tmp_path: Path
) -> None:
    with replicas(tmp_path, ["old"], place) as [old]:
        before = versions(kube, namespace, configuration)
        with replicas(tmp_path, ["new"], place) as [new]:
            assert versions(kube, namespace, configuration) == before
            served = new.served_certificate()
            assert served == old.served_certificate()
            assert trusted_by_every_bundle(served, kube, configuration)


def test_a_replica_of_this_release_keeps_the_previous_releases_secret_as_it_is(
    kube: KubeClient, place: Place, namespace: str, configuration: str, tmp_path: Path
) -> None:
    """The Secret and bundles as the previous release left them (its owner reference names the
    configuration by uid only): the upgrade's first new replica serves them unchanged."""
    uid = kube.get(f"{CONFIGS}/{configuration}")["metadata"]["uid"]
    names = certificates.service_names(SERVICE, namespace)
    now = datetime.datetime.now(datetime.UTC)
    material = certificates.issue(f"{SERVICE}-ca", names=names, now=now)
    owner = {"apiVersion": "admissionregistration.k8s.io/v1",
             "kind": "MutatingWebhookConfiguration", "name": configuration, "uid": uid}  # fmt: skip
    data = {"ca.crt": material.ca_bundle, "ca.key": material.ca_key, "tls.crt": material.cert,
            "tls.key": material.key}  # fmt: skip
    kube.create(f"/api/v1/namespaces/{namespace}/secrets", {
        "metadata": {"name": SECRET, "labels": LABELS, "ownerReferences": [owner]},
        "type": "kubernetes.io/tls",
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    })  # fmt: skip
    bundle = base64.b64encode(material.ca_bundle).decode()
    kube.patch(f"{CONFIGS}/{configuration}", {"webhooks": [
        {"name": name, "clientConfig": {"caBundle": bundle}} for name in HOOK_NAMES]},
        content_type="application/strategic-merge-patch+json")  # fmt: skip
    before = versions(kube, namespace, configuration)
    with replicas(tmp_path, ["new"], place) as [new]:
        assert versions(kube, namespace, configuration) == before
        served = new.served_certificate()
        assert served == x509.load_pem_x509_certificate(material.cert)


def test_two_replicas_starting_together_serve_one_certificate_every_bundle_trusts(
    kube: KubeClient, place: Place, namespace: str, configuration: str, tmp_path: Path
) -> None:
    with replicas(tmp_path, ["a", "b"], place) as [first, second]:
        served = first.served_certificate()
        assert served == second.served_certificate()
        stored = base64.b64decode(secret_of(kube, namespace)["data"]["tls.crt"])
        assert served == x509.load_pem_x509_certificate(stored)
        assert trusted_by_every_bundle(served, kube, configuration)
