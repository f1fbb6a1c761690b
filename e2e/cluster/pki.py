"""The cluster's key material: a CA, serving and client certificates, the service-account key pair.

Everything is ECDSA P-256 (fast to generate) and written as PEM files with 0600 permissions.
``issue_serving_cert`` is public so later tests can give an admission webhook a certificate the
apiserver trusts (``caBundle`` = the CA's PEM).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    """A certificate (or public key) and its private key, as PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class CertificateAuthority:
    cert_pem: bytes
    key: ec.EllipticCurvePrivateKey
    files: KeyPair

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


def create_ca(directory: Path, *, name: str = "vgpu-bridge-e2e-ca") -> CertificateAuthority:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    files = _write(directory, "ca", cert, key)
    return CertificateAuthority(cert.public_bytes(serialization.Encoding.PEM), key, files)


def load_ca(files: KeyPair) -> CertificateAuthority:
    """The CA written by ``create_ca`` (e.g. a running cluster's ``LocalCluster.ca``)."""
    key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{files.key}: not an EC private key")
    return CertificateAuthority(files.cert.read_bytes(), key, files)


def issue_serving_cert(
    ca: CertificateAuthority, directory: Path, name: str, *, hosts: tuple[str, ...]
) -> KeyPair:
    """A TLS server certificate whose SANs are ``hosts`` (IP addresses or DNS names)."""
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    return _issue(ca, directory, name, common_name=hosts[0], sans=sans, server=True)


def issue_client_cert(
    ca: CertificateAuthority, directory: Path, name: str, *, user: str, groups: tuple[str, ...]
) -> KeyPair:
    """A client certificate the apiserver maps to ``user`` in ``groups`` (CN and O)."""
    return _issue(ca, directory, name, common_name=user, organizations=groups, server=False)


def create_service_account_keys(directory: Path) -> KeyPair:
    """The key pair that signs service-account tokens (``cert`` holds the public key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = directory / "sa.pub"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private = directory / "sa.key"
    private.write_bytes(_private_pem(key))
    private.chmod(0o600)
    return KeyPair(cert=public, key=private)


def _issue(
    ca: CertificateAuthority,
    directory: Path,
    name: str,
    *,
    common_name: str,
    server: bool,
    sans: list[x509.GeneralName] | None = None,
    organizations: tuple[str, ...] = (),
) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return _write(directory, name, builder.sign(ca.key, hashes.SHA256()), key)


def _write(
    directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> KeyPair:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(_private_pem(key))
    key_path.chmod(0o600)
    return KeyPair(cert=cert_path, key=key_path)


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
