"""The webhook's own certificate authority and serving certificate (`--tls-secret`): made, checked
and renewed here, kept by `cert_keeper` in a Secret. Pure: bytes in, bytes out, the clock passed in.

A CA (ECDSA P-256, `CA_LIFETIME`) signs a serving certificate (`SERVING_LIFETIME`) for the
Service's DNS names. The serving certificate is renewed with the same CA once a third of its
lifetime is left, so the caBundle the API server trusts stays the same; the CA is renewed when it
could no longer outlive a new serving certificate, and its predecessor stays in the bundle while
it is valid, so replicas still serving a certificate it signed stay trusted until they reload; an
expired predecessor leaves the bundle. `trusted_by` says whether a bundle holds a certificate's
signer: the keeper serves a new CA's certificate only once the API server's bundle does.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = datetime.timedelta(days=3650)
SERVING_LIFETIME = datetime.timedelta(days=365)
#: a serving certificate with less than this left is renewed
SERVING_RENEW_BEFORE = SERVING_LIFETIME / 3
#: issued certificates start this far in the past (clocks of the API servers may lag)
BACKDATE = datetime.timedelta(minutes=5)
PEM = serialization.Encoding.PEM
#: a CA that signs certificates (and CRLs) and nothing else
CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


class CertificateError(ValueError):
    """Stored material that cannot be used (the message names the key and the reason)."""


@dataclass(frozen=True)
class Material:
    """What the Secret holds, PEM: `ca_bundle` (the signing CA first, then a predecessor still
    valid), `ca_key`, `cert` (serving, signed by the first CA) and `key`."""

    ca_bundle: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


def service_names(service: str, namespace: str) -> list[str]:
    """The names the API server may call the Service by (it verifies `<service>.<ns>.svc`)."""
    svc = f"{service}.{namespace}.svc"
    return [service, f"{service}.{namespace}", svc, f"{svc}.cluster.local"]


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _builder(subject: x509.Name, issuer: x509.Name, *, now: datetime.datetime,
             lifetime: datetime.timedelta) -> x509.CertificateBuilder:  # fmt: skip
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + lifetime)
    )


def _common_name(names: list[str]) -> str:
    """The name the API server checks (`<service>.<namespace>.svc`) when there is one."""
    return next((name for name in names if name.endswith(".svc")), names[0])


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def new_ca(common_name: str, *, now: datetime.datetime) -> tuple[bytes, bytes]:
    """(certificate, key) PEM of a new CA that may sign serving certificates only."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    cert = (
        _builder(name, name, now=now, lifetime=CA_LIFETIME)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(PEM), _key_pem(key)


def new_serving(
    ca_cert: bytes, ca_key: bytes, *, names: list[str], now: datetime.datetime
) -> tuple[bytes, bytes]:
    """(certificate, key) PEM of a serving certificate for `names`, signed by the CA."""
    issuer = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    if not isinstance(signer, ec.EllipticCurvePrivateKey):
        raise CertificateError("ca.key: not an ECDSA key")
    key = ec.generate_private_key(ec.SECP256R1())
    lifetime = min(SERVING_LIFETIME, issuer.not_valid_after_utc - now)
    cert = (
        _builder(_name(_common_name(names)), issuer.subject, now=now, lifetime=lifetime)
        .public_key(key.public_key())
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False
        )
        .sign(signer, hashes.SHA256())
    )
    return cert.public_bytes(PEM), _key_pem(key)


def issue(common_name: str, *, names: list[str], now: datetime.datetime) -> Material:
    """A new CA and a serving certificate it signed."""
    ca_cert, ca_key = new_ca(common_name, now=now)
    cert, key = new_serving(ca_cert, ca_key, names=names, now=now)
    return Material(ca_bundle=ca_cert, ca_key=ca_key, cert=cert, key=key)


def _load_one(pem: bytes, field: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as error:
        raise CertificateError(f"{field}: not a PEM certificate ({error})") from None


def _load_bundle(pem: bytes, field: str) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as error:
        raise CertificateError(f"{field}: not PEM certificates ({error})") from None
    return certs


def renewed(
    stored: Material, *, common_name: str, names: list[str], now: datetime.datetime
) -> Material | None:
    """None when `stored` serves `names` and needs nothing yet; else what replaces it: a new
    serving certificate from the same CA, or (the CA ending, unreadable or not the signer) a new
    CA too, the old one kept in the bundle while it is valid. Never raises on bad material."""
    try:
        cas = _load_bundle(stored.ca_bundle, "ca.crt")
        ca, cert = cas[0], _load_one(stored.cert, "tls.crt")
        serialization.load_pem_private_key(stored.ca_key, password=None)
        serialization.load_pem_private_key(stored.key, password=None)
        cert.verify_directly_issued_by(ca)
    except (CertificateError, ValueError, TypeError, InvalidSignature):
        return issue(common_name, names=names, now=now)
    if ca.not_valid_after_utc - now < SERVING_LIFETIME:
        fresh = issue(common_name, names=names, now=now)
        if ca.not_valid_after_utc <= now:
            return fresh
        bundle = fresh.ca_bundle + ca.public_bytes(PEM)  # the predecessor, while it is valid
        return Material(bundle, fresh.ca_key, fresh.cert, fresh.key)
    bundle = _without_expired(cas, now=now) or stored.ca_bundle
    if _serves(cert, names) and cert.not_valid_after_utc - now > SERVING_RENEW_BEFORE:
        return None if bundle is stored.ca_bundle else replace(stored, ca_bundle=bundle)
    new_cert, new_key = new_serving(ca.public_bytes(PEM), stored.ca_key, names=names, now=now)
    return Material(bundle, stored.ca_key, new_cert, new_key)


def _without_expired(cas: list[x509.Certificate], *, now: datetime.datetime) -> bytes | None:
    """The bundle without its expired predecessors (an expired CA signs nothing a replica may
    still serve), or None when none has expired."""
    kept = [cas[0], *(ca for ca in cas[1:] if ca.not_valid_after_utc > now)]
    if len(kept) == len(cas):
        return None
    return b"".join(ca.public_bytes(PEM) for ca in kept)


def trusted_by(cert: bytes, bundle: bytes) -> bool:
    """Whether a CA of the PEM `bundle` signed the PEM certificate `cert` (False for anything
    unreadable: an empty or damaged bundle trusts nothing)."""
    try:
        serving = x509.load_pem_x509_certificate(cert)
        cas = x509.load_pem_x509_certificates(bundle)
    except ValueError:
        return False
    return any(_signed(serving, ca) for ca in cas)


def _signed(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _serves(cert: x509.Certificate, names: list[str]) -> bool:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return set(names) <= set(san.get_values_for_type(x509.DNSName))


def expires(cert: bytes) -> datetime.datetime:
    """When a PEM certificate stops being valid."""
    return _load_one(cert, "tls.crt").not_valid_after_utc
