"""The chart's webhook TLS under GitOps (docs/tls.md): in the default mode (self-managed) two
`helm template` renders are byte-identical and hold no key material and no caBundle; `generate`
renders anew each time (the problem it keeps, documented); `cert-manager` renders an Issuer and a
Certificate that the API server, given cert-manager's own CRDs, accepts under strict field
validation, with nothing pruned."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from e2e.chart.cert_manager_crds import API as CERT_MANAGER_API
from e2e.chart.cert_manager_crds import CERT_MANAGER as CERT_MANAGER_CRDS
from e2e.chart.rendering import CHART, KUBE_VERSION, Helm, Json, of_kind, one
from e2e.chart.test_on_cluster import EVERYTHING_ON
from e2e.cluster import KubeClient, Settings
from e2e.cluster.client import ApiError
from e2e.upstream_crds import installed, kept, strict_dry_run

pytestmark = pytest.mark.e2e

CERT_MANAGER: Json = {"tls": {"mode": "cert-manager"}}
CLUSTER_ISSUER: Json = {
    "tls": {
        "mode": "cert-manager",
        "certManager": {
            "issuerRef": {"kind": "ClusterIssuer", "name": "corp-ca", "group": "cert-manager.io"}
        },
    }
}


def render(helm: Helm, values: Json) -> str:
    """helm template's output as text, as a GitOps tool sees it."""
    return helm.run("template", "vgpu-bridge", str(CHART), "--namespace", "vgpu-bridge",
                    "--kube-version", KUBE_VERSION, values=values)  # fmt: skip


@pytest.mark.parametrize("values", [{}, EVERYTHING_ON], ids=["defaults", "everything-on"])
def test_two_renders_of_the_default_mode_are_byte_identical(helm: Helm, values: Json) -> None:
    assert render(helm, values) == render(helm, values)


def test_the_default_mode_renders_no_key_material_and_no_ca_bundle(helm: Helm) -> None:
    text = render(helm, {})
    assert "PRIVATE KEY" not in text
    assert "caBundle:" not in text
    objects = helm.template()
    assert not of_kind(objects, "Secret")
    env = {
        var["name"]: var.get("value")
        for var in one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    configuration = one(objects, "MutatingWebhookConfiguration")
    assert env["VGPU_BRIDGE_TLS_WEBHOOK_CONFIGURATION"] == configuration["metadata"]["name"]
    assert (
        env["VGPU_BRIDGE_TLS_SERVICE"]
        == configuration["webhooks"][0]["clientConfig"]["service"]["name"]
    )
    assert env["VGPU_BRIDGE_TLS_SECRET"] == "vgpu-bridge-webhook-cert"


def test_the_webhook_may_set_its_own_configuration_and_secret_and_no_others(helm: Helm) -> None:
    objects = helm.template()
    configuration = one(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    roles = {o["metadata"]["name"]: o for o in of_kind(objects, "ClusterRole")}
    [cluster_rule] = roles["vgpu-bridge-webhook-certificate"]["rules"]
    assert cluster_rule["resourceNames"] == [configuration]
    assert cluster_rule["verbs"] == ["get", "patch"]
    [role] = [o for o in of_kind(objects, "Role") if o["metadata"]["name"].endswith("-certificate")]
    named = [rule for rule in role["rules"] if rule.get("resourceNames")]
    secret_rule = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "update"],
                   "resourceNames": ["vgpu-bridge-webhook-cert"]}  # fmt: skip
    assert named == [secret_rule]


def test_generate_mode_makes_a_new_ca_on_every_render(helm: Helm) -> None:
    """Why it is not the default: a GitOps tool renders it anew on every sync."""
    values = {"tls": {"mode": "generate"}}
    assert render(helm, values) != render(helm, values)


@pytest.fixture(scope="module")
def cert_manager_kinds(kube: KubeClient, e2e_settings: Settings) -> Iterator[dict[str, str]]:
    """cert-manager's CRDs on the local cluster while these tests run; kind -> plural."""
    with installed(kube, CERT_MANAGER_CRDS.crds(e2e_settings)) as kinds:
        yield kinds


def _dry_run_create(kube: KubeClient, obj: Json, plural: str, namespace: str) -> Json:
    return strict_dry_run(kube, obj, CERT_MANAGER_API, plural, namespace)


@pytest.mark.parametrize(
    "values", [CERT_MANAGER, CLUSTER_ISSUER], ids=["own-issuer", "cluster-issuer"]
)
def test_cert_manager_objects_pass_strict_validation_under_its_crds(
    helm: Helm, kube: KubeClient, namespace: str, cert_manager_kinds: dict[str, str], values: Json
) -> None:
    objects = [
        o
        for o in helm.template(values, namespace=namespace)
        if o["kind"] in ("Certificate", "Issuer")
    ]
    expected = {"Certificate", "Issuer"} if values is CERT_MANAGER else {"Certificate"}
    assert {o["kind"] for o in objects} == expected
    for obj in objects:
        accepted = _dry_run_create(kube, obj, cert_manager_kinds[obj["kind"]], namespace)
        assert kept(obj["spec"], accepted["spec"]), obj["metadata"]["name"]  # nothing pruned


def test_strict_validation_would_refuse_a_misspelt_certificate(
    helm: Helm, kube: KubeClient, namespace: str, cert_manager_kinds: dict[str, str]
) -> None:
    certificate = copy.deepcopy(
        one(helm.template(CERT_MANAGER, namespace=namespace), "Certificate")
    )
    certificate["spec"]["renewBefor"] = "720h"
    with pytest.raises(ApiError, match="renewBefor"):
        _dry_run_create(kube, certificate, cert_manager_kinds["Certificate"], namespace)
