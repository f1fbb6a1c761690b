"""The keeper of the webhook's own certificate against an API server in a dict: on a CA rollover
the configuration trusts the new CA before any replica serves a certificate it signed, and the
old CA leaves the bundle only once it has expired."""

from __future__ import annotations

import base64
import copy
import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from kubernetes import client

from vgpu_bridge.kube import KubeApi, KubeError
from vgpu_bridge.webhook import cert_keeper, certificates
from vgpu_bridge.webhook.cert_keeper import (
    CONFIGURATIONS,
    KEYS,
    CertificateKeeper,
    Places,
    write_pair,
)
from vgpu_bridge.webhook.certificates import Material

Json = dict[str, Any]
NAMESPACE, SECRET, CONFIGURATION, SERVICE = "gpu-system", "webhook-cert", "gpu-sharing", "webhook"
SECRET_PATH = f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}"
CONFIGURATION_PATH = f"{CONFIGURATIONS}/{CONFIGURATION}"
NAMES = certificates.service_names(SERVICE, NAMESPACE)
START = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)


class FakeApi(KubeApi):
    """One configuration (two webhooks) and the Secret; `on_patch` sees each caBundle patch."""

    def __init__(self) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        hooks: list[Json] = [{"name": n, "clientConfig": {}} for n in ("pods.x", "workloads.x")]
        self.configuration: Json = {"metadata": {"uid": "config-uid"}, "webhooks": hooks}
        self.secret: Json | None = None
        self.version = 0

    def get(self, path: str) -> Json:
        if path == CONFIGURATION_PATH:
            return copy.deepcopy(self.configuration)
        if path == SECRET_PATH and self.secret is not None:
            return copy.deepcopy(self.secret)
        raise KubeError("GET", path, 404, "not found")

    def create(self, path: str, body: Json, **query: Any) -> Json:
        return self.replace(SECRET_PATH, body)

    def replace(self, path: str, body: Json) -> Json:
        self.version += 1
        self.secret = copy.deepcopy(body)
        self.secret["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.secret)

    def request(self, method: str, path: str, **kwargs: Any) -> Json:
        assert (method, path) == ("PATCH", CONFIGURATION_PATH)
        for change in kwargs["body"]["webhooks"]:
            hook = next(h for h in self.configuration["webhooks"] if h["name"] == change["name"])
            hook["clientConfig"].update(change["clientConfig"])
        return copy.deepcopy(self.configuration)

    def bundles(self) -> list[bytes]:
        """Each webhook's caBundle, decoded."""
        return [
            base64.b64decode(hook["clientConfig"].get("caBundle", ""))
            for hook in self.configuration["webhooks"]
        ]

    def store(self, material: Material) -> None:
        data = {key: base64.b64encode(getattr(material, f)).decode() for f, key in KEYS.items()}
        owner = {"uid": "config-uid"}
        self.secret = {
            "type": "kubernetes.io/tls",
            "metadata": {"resourceVersion": "1", "ownerReferences": [owner]},
            "data": data,
        }


class Clock:
    def __init__(self, now: datetime.datetime) -> None:
        self.now = now

    def __call__(self) -> datetime.datetime:
        return self.now


def keeper_for(api: FakeApi, tmp_path: Path, clock: Clock) -> CertificateKeeper:
    places = Places(namespace=NAMESPACE, secret=SECRET, configuration=CONFIGURATION,
                    service=SERVICE, cert_file=tmp_path / "tls.crt",
                    key_file=tmp_path / "tls.key")  # fmt: skip
    return CertificateKeeper(api, places, clock=clock)


def signer(cert: bytes, bundle: bytes) -> x509.Certificate | None:
    """The CA of `bundle` that signed `cert`, if any."""
    serving = x509.load_pem_x509_certificate(cert)
    for ca in x509.load_pem_x509_certificates(bundle) if bundle else ():
        try:
            serving.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return ca
    return None


def trusted_everywhere(api: FakeApi, cert: bytes) -> bool:
    return all(signer(cert, bundle) is not None for bundle in api.bundles())


def an_installed_replica(tmp_path: Path) -> tuple[FakeApi, CertificateKeeper, Clock, Material]:
    """A replica that made its certificate at START and serves it, the configuration trusting
    its CA; its clock then moved to where the CA must be replaced."""
    api, clock = FakeApi(), Clock(START)
    keeper = keeper_for(api, tmp_path, clock)
    keeper.sync()
    assert api.secret is not None
    first = Material(**{f: base64.b64decode(api.secret["data"][k]) for f, k in KEYS.items()})
    clock.now = START + certificates.CA_LIFETIME - certificates.SERVING_LIFETIME + DAY
    return api, keeper, clock, first


def test_a_fresh_install_serves_at_once_and_is_trusted(tmp_path: Path) -> None:
    api, clock = FakeApi(), Clock(START)
    keeper_for(api, tmp_path, clock).sync()
    served = (tmp_path / "tls.crt").read_bytes()
    assert trusted_everywhere(api, served)


def test_on_a_ca_rollover_the_new_ca_is_trusted_before_it_is_served(tmp_path: Path) -> None:
    api, keeper, _, first = an_installed_replica(tmp_path)
    keeper.sync()  # the pass that replaces the CA
    old_ca = x509.load_pem_x509_certificates(first.ca_bundle)[0]
    assert api.secret is not None
    new_bundle = base64.b64decode(api.secret["data"]["ca.crt"])
    new_ca = x509.load_pem_x509_certificates(new_bundle)[0]
    assert new_ca != old_ca
    for bundle in api.bundles():  # old and new both trusted now
        assert set(x509.load_pem_x509_certificates(bundle)) >= {old_ca, new_ca}
    # ... but the replica still serves the old CA's certificate: the API server may not have
    # seen the new bundle yet
    assert (tmp_path / "tls.crt").read_bytes() == first.cert

    keeper.sync()  # the next pass: the bundle it reads trusts the new CA already
    served = (tmp_path / "tls.crt").read_bytes()
    assert signer(served, new_ca.public_bytes(certificates.PEM)) is not None
    assert trusted_everywhere(api, served)


def test_another_replica_serves_the_new_ca_only_once_the_configuration_trusts_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    api, keeper, clock, first = an_installed_replica(tmp_path / "a")
    other = keeper_for(api, tmp_path / "b", clock)
    write_pair(first, cert_file=tmp_path / "b" / "tls.crt", key_file=tmp_path / "b" / "tls.key")
    keeper.sync()  # replica a replaces the CA and writes the bundle
    other.sync()  # replica b reads a bundle that already trusts the new CA
    served = (tmp_path / "b" / "tls.crt").read_bytes()
    assert served != first.cert
    assert trusted_everywhere(api, served)


def test_a_replica_never_writes_a_certificate_the_configuration_does_not_trust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, keeper, clock, _ = an_installed_replica(tmp_path)
    written: list[bool] = []

    def checked_write(material: Material, *, cert_file: Path, key_file: Path) -> bool:
        written.append(trusted_everywhere(api, material.cert))
        return write_pair(material, cert_file=cert_file, key_file=key_file)

    monkeypatch.setattr(cert_keeper, "write_pair", checked_write)
    for _ in range(3):
        keeper.sync()
        clock.now += datetime.timedelta(seconds=15)
    assert written
    assert all(written)


def test_the_old_ca_leaves_the_bundle_once_it_has_expired(tmp_path: Path) -> None:
    api, keeper, clock, first = an_installed_replica(tmp_path)
    keeper.sync()
    keeper.sync()
    old_ca = x509.load_pem_x509_certificates(first.ca_bundle)[0]
    clock.now = old_ca.not_valid_after_utc + DAY
    keeper.sync()
    for bundle in api.bundles():
        assert old_ca not in x509.load_pem_x509_certificates(bundle)
    assert trusted_everywhere(api, (tmp_path / "tls.crt").read_bytes())
