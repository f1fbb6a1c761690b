"""The webhook's own CA and serving certificate (`--tls-secret`): what is issued, when it is
renewed, and that a TLS client trusting the CA bundle accepts the serving certificate by the
name the API server uses, across a renewal of the serving certificate and of the CA."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509

from vgpu_bridge.webhook import certificates
from vgpu_bridge.webhook.cert_keeper import write_pair
from vgpu_bridge.webhook.certificates import Material

NOW = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=datetime.UTC)
NAMES = certificates.service_names("vgpu-bridge-webhook", "gpu-system")
DAY = datetime.timedelta(days=1)


def issued(now: datetime.datetime = NOW) -> Material:
    return certificates.issue("vgpu-bridge-webhook-ca", names=NAMES, now=now)


def renewed(stored: Material, now: datetime.datetime) -> Material | None:
    return certificates.renewed(stored, common_name="vgpu-bridge-webhook-ca", names=NAMES, now=now)


def handshake(material: Material, tmp_path: Path, *, server_name: str) -> None:
    """A TLS handshake: a server with the serving pair, a client trusting only the CA bundle
    (as the API server does with the caBundle) and checking `server_name`."""
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    write_pair(material, cert_file=cert_file, key_file=key_file)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert_file, key_file)
    client_context = ssl.create_default_context(cadata=material.ca_bundle.decode())
    left, right = socket.socketpair()
    with left, right:
        served = threading.Thread(target=lambda: _accept(server_context, left), daemon=True)
        served.start()
        with client_context.wrap_socket(right, server_hostname=server_name):
            pass
        served.join(timeout=10)


def signed_by_first_ca(material: Material) -> None:
    """The serving certificate was signed by the bundle's first CA and names the Service."""
    ca = x509.load_pem_x509_certificates(material.ca_bundle)[0]
    serving = x509.load_pem_x509_certificate(material.cert)
    serving.verify_directly_issued_by(ca)
    san = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == NAMES


def _accept(context: ssl.SSLContext, sock: socket.socket) -> None:
    try:
        with context.wrap_socket(sock, server_side=True):
            pass
    except (ssl.SSLError, OSError):
        pass  # the client refused the certificate: the client side reports it


def test_names_are_those_the_api_server_may_call_the_service_by() -> None:
    assert NAMES == [
        "vgpu-bridge-webhook",
        "vgpu-bridge-webhook.gpu-system",
        "vgpu-bridge-webhook.gpu-system.svc",
        "vgpu-bridge-webhook.gpu-system.svc.cluster.local",
    ]


def test_the_serving_certificate_is_trusted_by_the_bundle_under_the_service_name(
    tmp_path: Path,
) -> None:
    handshake(issued(), tmp_path, server_name="vgpu-bridge-webhook.gpu-system.svc")


def test_another_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match=r"mismatch|doesn't match"):
        handshake(issued(), tmp_path, server_name="other.gpu-system.svc")


def test_the_ca_signs_only_certificates_and_the_serving_one_only_serves() -> None:
    material = issued()
    ca = x509.load_pem_x509_certificate(material.ca_bundle)
    serving = x509.load_pem_x509_certificate(material.cert)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not serving.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert serving.not_valid_after_utc == NOW + certificates.SERVING_LIFETIME
    assert ca.not_valid_after_utc == NOW + certificates.CA_LIFETIME
    assert b"PRIVATE KEY" in material.key
    assert b"PRIVATE KEY" in material.ca_key


def test_a_fresh_certificate_needs_nothing() -> None:
    assert renewed(issued(), NOW + 200 * DAY) is None


def test_the_serving_certificate_is_renewed_from_the_same_ca_a_third_before_its_end() -> None:
    stored = issued()
    now = NOW + certificates.SERVING_LIFETIME - certificates.SERVING_RENEW_BEFORE + DAY
    fresh = renewed(stored, now)
    assert fresh is not None
    assert fresh.ca_bundle == stored.ca_bundle  # the caBundle the API server has stays right
    assert fresh.cert != stored.cert
    assert fresh.key != stored.key
    assert certificates.expires(fresh.cert) == now + certificates.SERVING_LIFETIME
    signed_by_first_ca(fresh)


def test_a_certificate_for_other_names_is_replaced() -> None:
    stored = certificates.issue("x", names=["old.gpu-system.svc", "old"], now=NOW)
    fresh = renewed(stored, NOW + DAY)
    assert fresh is not None
    assert fresh.ca_bundle == stored.ca_bundle


def test_an_ending_ca_is_replaced_and_the_old_one_stays_in_the_bundle_while_valid(
    tmp_path: Path,
) -> None:
    stored = issued()
    now = NOW + certificates.CA_LIFETIME - certificates.SERVING_LIFETIME + DAY
    fresh = renewed(stored, now)
    assert fresh is not None
    old_ca = x509.load_pem_x509_certificate(stored.ca_bundle)
    bundle = x509.load_pem_x509_certificates(fresh.ca_bundle)
    assert len(bundle) == 2
    assert bundle[1] == old_ca
    assert bundle[0] != old_ca
    signed_by_first_ca(fresh)
    # a replica still serving the old pair is still trusted by the new bundle
    still_old = Material(fresh.ca_bundle, stored.ca_key, stored.cert, stored.key)
    handshake(still_old, tmp_path, server_name=NAMES[2])


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param({"cert": b"not pem"}, id="unreadable-certificate"),
        pytest.param({"ca_bundle": b""}, id="no-ca"),
        pytest.param({"key": b"-----BEGIN PRIVATE KEY-----\nAAAA\n"}, id="broken-key"),
        pytest.param({"ca_key": b""}, id="no-ca-key"),
    ],
)
def test_unusable_material_is_replaced_whole(damage: dict[str, bytes]) -> None:
    stored = issued()
    broken = Material(**{**stored.__dict__, **damage})
    fresh = renewed(broken, NOW + DAY)
    assert fresh is not None
    assert fresh.ca_bundle != stored.ca_bundle


def test_a_certificate_another_ca_signed_is_replaced() -> None:
    one, other = issued(), issued()
    mixed = Material(one.ca_bundle, one.ca_key, other.cert, other.key)
    fresh = renewed(mixed, NOW + DAY)
    assert fresh is not None
    signed_by_first_ca(fresh)


def test_the_key_file_is_readable_by_its_owner_alone_and_rewritten_only_on_change(
    tmp_path: Path,
) -> None:
    material = issued()
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    assert write_pair(material, cert_file=cert_file, key_file=key_file)
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert key_file.read_bytes() == material.key
    assert cert_file.read_bytes() == material.cert
    assert not write_pair(material, cert_file=cert_file, key_file=key_file)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tls.crt", "tls.key"]  # no temporaries
