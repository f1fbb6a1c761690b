"""The harness's pure parts, without a cluster: go.mod generation, settings, PKI, quantities."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from cryptography import x509

from e2e.cluster.gomod import GoModError, render_gomod
from e2e.cluster.pki import create_ca, issue_client_cert, issue_serving_cert, load_ca
from e2e.cluster.settings import DEFAULT_K8S_VERSION, Settings, SettingsError
from e2e.dra_objects import quantity

UPSTREAM = """module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
\tgithub.com/spf13/cobra v1.10.2
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/streaming => ./staging/src/k8s.io/streaming
\tk8s.io/cri-streaming => ./staging/src/k8s.io/cri-streaming
)
"""


def test_gomod_replaces_every_staging_module_with_its_published_tag() -> None:
    rendered = render_gomod(UPSTREAM, "v1.36.3")

    assert "\tk8s.io/api => k8s.io/api v0.36.3\n" in rendered
    assert "\tk8s.io/cri-streaming => k8s.io/cri-streaming v0.36.3\n" in rendered
    assert "\tk8s.io/streaming => k8s.io/streaming v0.36.3\n" in rendered
    assert "require k8s.io/kubernetes v1.36.3\n" in rendered
    assert "\ngo 1.26.0\n" in rendered
    assert "\ngodebug default=go1.26\n" in rendered
    assert "./staging" not in rendered


def test_gomod_refuses_an_upstream_without_staging_replacements() -> None:
    with pytest.raises(GoModError):
        render_gomod("module k8s.io/kubernetes\n\ngo 1.26.0\n", "v1.36.3")


def test_committed_gomod_is_what_the_generator_writes_for_the_pinned_release() -> None:
    committed = (Path(__file__).parent / "cluster" / "gotools" / "go.mod").read_text()
    assert f"\tk8s.io/kubernetes {DEFAULT_K8S_VERSION}\n" in committed  # go mod tidy's form
    minor_patch = DEFAULT_K8S_VERSION.removeprefix("v1.")
    replaces = [line for line in committed.splitlines() if " => " in line]
    assert len(replaces) >= 33
    assert all(line.endswith(f" v0.{minor_patch}") for line in replaces)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("v1.37.2", "v1.37.2"), ("1.36.1", "v1.36.1"), (None, DEFAULT_K8S_VERSION)],
)
def test_settings_take_the_kubernetes_release_from_k8s_version(
    value: str | None, expected: str
) -> None:
    env = {"HOME": "/home/x"} if value is None else {"HOME": "/home/x", "K8S_VERSION": value}
    settings = Settings.from_env(env)
    assert settings.k8s_version == expected
    assert settings.binary.parent.parent.name == f"k8s-{expected}"


@pytest.mark.parametrize("value", ["v1.35.4", "latest", "v1.36"])
def test_settings_reject_releases_before_1_36_and_non_versions(value: str) -> None:
    with pytest.raises(SettingsError):
        Settings.from_env({"K8S_VERSION": value})


def test_settings_keep_caches_outside_the_repository(tmp_path: Path) -> None:
    settings = Settings.from_env({"VGPU_BRIDGE_CACHE": str(tmp_path)})
    assert settings.binary.is_relative_to(tmp_path)
    assert all(Path(settings.go_env[k]).is_relative_to(tmp_path) for k in ("GOMODCACHE", "GOCACHE"))


def test_serving_certificate_names_its_hosts_and_is_signed_by_the_ca(tmp_path: Path) -> None:
    ca = create_ca(tmp_path)
    pair = issue_serving_cert(ca, tmp_path, "webhook", hosts=("127.0.0.1", "localhost"))
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())

    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert cert.issuer == ca.certificate.subject
    cert.verify_directly_issued_by(ca.certificate)


def test_a_reloaded_ca_issues_certificates_that_chain_to_it(tmp_path: Path) -> None:
    ca = load_ca(create_ca(tmp_path).files)
    pair = issue_serving_cert(ca, tmp_path, "again", hosts=("localhost",))
    x509.load_pem_x509_certificate(pair.cert.read_bytes()).verify_directly_issued_by(ca.certificate)


def test_admin_client_certificate_carries_user_and_groups(tmp_path: Path) -> None:
    ca = create_ca(tmp_path)
    pair = issue_client_cert(ca, tmp_path, "admin", user="admin", groups=("system:masters",))
    subject = x509.load_pem_x509_certificate(pair.cert.read_bytes()).subject
    assert subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == "admin"
    organization = subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)[0].value
    assert organization == "system:masters"
    assert pair.key.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10Gi", Decimal(10 * 2**30)),
        ("2500Mi", Decimal(2500 * 2**20)),
        ("25", Decimal(25)),
        ("1500m", Decimal("1.5")),
        ("3G", Decimal(3 * 10**9)),
    ],
)
def test_quantities_compare_as_numbers(text: str, value: Decimal) -> None:
    assert quantity(text) == value


def test_a_malformed_quantity_is_an_error() -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        quantity("10 GiB")
