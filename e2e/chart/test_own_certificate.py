"""The webhook's own certificate (`--tls-secret`, the chart's default `tls.mode: self-managed`)
against the real API server: the first replica makes the Secret and sets the caBundle; another
replica uses the same Secret, also when it lost the race to create it; a renewal reaches the
Secret, the files and the other replicas and keeps the caBundle; a caBundle an upgrade left out
is put back; a new CA is in every caBundle a pass before it is served; a Secret that cannot be
ours is named, never overwritten."""

from __future__ import annotations

import base64
import datetime
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.client import Json
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.webhook import certificates
from vgpu_bridge.webhook.cert_keeper import (
    CertificateKeeper,
    CertificateSecretError,
    Places,
)

pytestmark = pytest.mark.e2e

CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
HOOK_NAMES = ("pods.vgpu-bridge.io", "workloads.vgpu-bridge.io")


def entry(name: str, namespace: str) -> Json:
    """A webhook entry as the chart renders it (a Service, no caBundle) that no namespace
    matches, so that the rest of the session is left alone."""
    return {
        "name": name,
        "clientConfig": {"service": {"name": "webhook", "namespace": namespace, "path": "/mutate"}},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["pods"]}],
        "namespaceSelector": {"matchLabels": {"e2e.vgpu-bridge.io/never": "true"}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }  # fmt: skip


@pytest.fixture
def configuration(kube: KubeClient, namespace: str) -> Iterator[str]:
    name = f"own-certificate-{namespace}"
    body = {"metadata": {"name": name}, "webhooks": [entry(n, namespace) for n in HOOK_NAMES]}
    kube.create(CONFIGS, body)
    yield name
    kube.delete(f"{CONFIGS}/{name}")


@pytest.fixture(scope="module")
def api(e2e_cluster: LocalCluster) -> KubeApi:
    return KubeApi.connect(str(e2e_cluster.kubeconfig))


def replica(
    api: KubeApi, namespace: str, configuration: str, files: Path, *, days_later: int = 0
) -> CertificateKeeper:
    """One replica's keeper, writing to its own `files` directory; its clock `days_later`."""
    files.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = files / "tls.crt", files / "tls.key"
    places = Places(namespace=namespace, secret="webhook-cert", configuration=configuration,
                    service="webhook", cert_file=cert_file, key_file=key_file)  # fmt: skip
    later = datetime.timedelta(days=days_later)
    return CertificateKeeper(api, places, clock=lambda: datetime.datetime.now(datetime.UTC) + later)


def secret_of(kube: KubeClient, namespace: str) -> Json:
    return kube.get(f"/api/v1/namespaces/{namespace}/secrets/webhook-cert")


def bundles(kube: KubeClient, configuration: str) -> list[str | None]:
    hooks = kube.get(f"{CONFIGS}/{configuration}")["webhooks"]
    return [hook["clientConfig"].get("caBundle") for hook in hooks]


def test_the_first_replica_makes_the_secret_and_sets_every_ca_bundle(
    kube: KubeClient, api: KubeApi, namespace: str, configuration: str, tmp_path: Path
) -> None:
    keeper = replica(api, namespace, configuration, tmp_path / "a")
    assert keeper.sync()
    secret = secret_of(kube, namespace)
    assert secret["type"] == "kubernetes.io/tls"
    assert sorted(secret["data"]) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    uid = kube.get(f"{CONFIGS}/{configuration}")["metadata"]["uid"]
    [owner] = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "MutatingWebhookConfiguration",
        configuration,
        uid,
    )
    assert "app.kubernetes.io/instance" not in secret["metadata"]["labels"]  # Argo CD would prune
    assert bundles(kube, configuration) == [secret["data"]["ca.crt"]] * len(HOOK_NAMES)
    cert = (tmp_path / "a" / "tls.crt").read_bytes()
    assert base64.b64decode(secret["data"]["tls.crt"]) == cert
    assert (tmp_path / "a" / "tls.key").stat().st_mode & 0o777 == 0o600
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    x509.load_pem_x509_certificate(cert).verify_directly_issued_by(ca)
    assert not keeper.sync()  # nothing to do: nothing written, nothing patched


def test_another_replica_serves_the_same_certificate_also_after_losing_the_race(
    kube: KubeClient, api: KubeApi, namespace: str, configuration: str, tmp_path: Path
) -> None:
    first = replica(api, namespace, configuration, tmp_path / "a")
    second = replica(api, namespace, configuration, tmp_path / "b")
    first.sync()
    second.sync()
    for name in ("tls.crt", "tls.key"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    # the second replica's create came after the first's: it is answered 409 and reads theirs
    uid = kube.get(f"{CONFIGS}/{configuration}")["metadata"]["uid"]
    lost = replica(api, namespace, configuration, tmp_path / "c")._create(uid)
    assert lost.cert == (tmp_path / "a" / "tls.crt").read_bytes()


def test_a_renewal_keeps_the_ca_bundle_and_reaches_the_other_replicas(
    kube: KubeClient, api: KubeApi, namespace: str, configuration: str, tmp_path: Path
) -> None:
    first = replica(api, namespace, configuration, tmp_path / "a")
    first.sync()
    before = secret_of(kube, namespace)["data"]
    days = (certificates.SERVING_LIFETIME - certificates.SERVING_RENEW_BEFORE).days + 1
    later = replica(api, namespace, configuration, tmp_path / "b", days_later=days)
    assert later.sync()
    after = secret_of(kube, namespace)["data"]
    assert after["ca.crt"] == before["ca.crt"]
    assert after["tls.crt"] != before["tls.crt"]
    assert bundles(kube, configuration) == [before["ca.crt"]] * len(HOOK_NAMES)
    assert first.sync()  # the first replica picks up the renewed pair
    assert (tmp_path / "a" / "tls.crt").read_bytes() == base64.b64decode(after["tls.crt"])


def test_a_new_ca_is_in_every_ca_bundle_a_pass_before_it_is_served(
    kube: KubeClient, api: KubeApi, namespace: str, configuration: str, tmp_path: Path
) -> None:
    replica(api, namespace, configuration, tmp_path / "a").sync()
    old = secret_of(kube, namespace)["data"]
    days = (certificates.CA_LIFETIME - certificates.SERVING_LIFETIME).days + 1
    later = replica(api, namespace, configuration, tmp_path / "a", days_later=days)
    assert not later.sync()  # the CA is replaced: the bundle first, the files stay
    new = secret_of(kube, namespace)["data"]
    new_ca, old_ca = x509.load_pem_x509_certificates(base64.b64decode(new["ca.crt"]))
    assert old_ca == x509.load_pem_x509_certificate(base64.b64decode(old["ca.crt"]))
    assert bundles(kube, configuration) == [new["ca.crt"]] * len(HOOK_NAMES)
    assert (tmp_path / "a" / "tls.crt").read_bytes() == base64.b64decode(old["tls.crt"])
    assert later.sync()  # the next pass reads a bundle that holds the new CA: it switches
    served = x509.load_pem_x509_certificate((tmp_path / "a" / "tls.crt").read_bytes())
    served.verify_directly_issued_by(new_ca)


def test_a_ca_bundle_an_upgrade_left_out_is_put_back(
    kube: KubeClient, api: KubeApi, namespace: str, configuration: str, tmp_path: Path
) -> None:
    keeper = replica(api, namespace, configuration, tmp_path / "a")
    keeper.sync()
    live = kube.get(f"{CONFIGS}/{configuration}")
    live["webhooks"].append(entry("volcano.vgpu-bridge.io", namespace))  # a toggle turned on
    kube.replace(f"{CONFIGS}/{configuration}", live)
    assert bundles(kube, configuration)[-1] is None
    assert not keeper.sync()  # the files stay as they are
    assert bundles(kube, configuration) == [secret_of(kube, namespace)["data"]["ca.crt"]] * 3


def test_a_secret_of_another_type_is_named_and_left_alone(
    kube: KubeClient, api: KubeApi, namespace: str, configuration: str, tmp_path: Path
) -> None:
    kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {"metadata": {"name": "webhook-cert"}, "type": "Opaque", "data": {"x": "eA=="}},
    )
    keeper = replica(api, namespace, configuration, tmp_path / "a")
    with pytest.raises(CertificateSecretError, match=f"{namespace}/webhook-cert.*Opaque"):
        keeper.ensure(deadline_s=5)
    assert secret_of(kube, namespace)["data"] == {"x": "eA=="}
    assert bundles(kube, configuration) == [None, None]


def test_the_webhook_will_not_start_on_a_secret_that_cannot_be_its_own(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, configuration: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {"metadata": {"name": "webhook-cert"}, "type": "Opaque", "data": {"x": "eA=="}},
    )
    env = {
        **os.environ,
        "VGPU_BRIDGE_LISTEN": "127.0.0.1:0",
        "VGPU_BRIDGE_NAMESPACE": namespace,
        "VGPU_BRIDGE_TLS_SECRET": "webhook-cert",
        "VGPU_BRIDGE_TLS_WEBHOOK_CONFIGURATION": configuration,
        "VGPU_BRIDGE_TLS_CERT_FILE": str(tmp_path / "tls.crt"),
        "VGPU_BRIDGE_TLS_KEY_FILE": str(tmp_path / "tls.key"),
        "VGPU_BRIDGE_KUBECONFIG": str(e2e_cluster.kubeconfig),
    }
    done = subprocess.run([sys.executable, "-m", "vgpu_bridge.cli", "webhook"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().endswith(
        f"cannot start: no serving certificate: Secret {namespace}/webhook-cert: type 'Opaque', "
        "not kubernetes.io/tls (a type cannot be changed): delete it and the webhook makes its own"
    ), done.stderr
    assert not (tmp_path / "tls.key").exists()
