"""The chart's defences around the webhook, as rendered: an opt-in NetworkPolicy that admits only
addresses outside the pod network (or the peers given), CEL matchConditions on by default, and
the API server's client CA wired to --client-ca-file. (Every rendered object also passes the
real API server's validation: test_on_cluster.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.chart.rendering import Helm, Json, containers, of_kind, one

pytestmark = pytest.mark.e2e


POD_NETWORK = {"webhook": {"networkPolicy": {"enabled": True, "podCIDRs": ["10.244.0.0/16"]}}}


def policy(helm: Helm, network_policy: dict[str, Any], **values: Any) -> Json:
    """The NetworkPolicy, enabled with ``network_policy`` (and other ``values``)."""
    webhook = {**values.pop("webhook", {}), "networkPolicy": {"enabled": True, **network_policy}}
    return one(helm.template({**values, "webhook": webhook}), "NetworkPolicy")


def test_no_policy_by_default(helm: Helm) -> None:
    """Off unless asked: a policy that guessed the API server's address wrong would make the
    fail-closed webhook refuse every GPU pod (docs/networkpolicy.md)."""
    assert of_kind(helm.template(), "NetworkPolicy") == []


def test_enabled_without_pod_cidrs_or_peers_is_refused_with_the_values_to_set(helm: Helm) -> None:
    message = helm.template_error({"webhook": {"networkPolicy": {"enabled": True}}})
    assert "webhook.networkPolicy.enabled needs webhook.networkPolicy.podCIDRs" in message
    assert "webhook.networkPolicy.from" in message
    assert "docs/networkpolicy.md" in message


def test_enabled_only_addresses_outside_the_pod_network_reach_the_webhook(helm: Helm) -> None:
    objects = helm.template(POD_NETWORK)
    rendered = one(objects, "NetworkPolicy")
    deployment = one(objects, "Deployment")
    assert (
        rendered["spec"]["podSelector"]["matchLabels"]
        == deployment["spec"]["selector"]["matchLabels"]
    )
    assert rendered["spec"]["policyTypes"] == ["Ingress"]
    [rule] = rendered["spec"]["ingress"]
    assert rule["ports"] == [{"port": "https", "protocol": "TCP"}]
    blocks = [peer["ipBlock"] for peer in rule["from"] if "ipBlock" in peer]
    assert {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]} in blocks
    assert {"cidr": "::/0"} in blocks
    pods = [peer for peer in rule["from"] if "podSelector" in peer]
    assert pods == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "konnectivity-agent"}}}]  # fmt: skip


def test_given_peers_replace_the_default_and_pod_cidrs_of_both_families_are_refused(
    helm: Helm,
) -> None:
    api_server = {"ipBlock": {"cidr": "172.18.0.2/32"}}
    rendered = policy(helm, {"from": [api_server], "extraFrom": []})
    assert rendered["spec"]["ingress"][0]["from"] == [api_server]
    dual = policy(helm, {"podCIDRs": ["10.1.0.0/16", "fd00:10::/56"]})
    blocks = [p["ipBlock"] for p in dual["spec"]["ingress"][0]["from"] if "ipBlock" in p]
    assert blocks == [{"cidr": "0.0.0.0/0", "except": ["10.1.0.0/16"]},
                      {"cidr": "::/0", "except": ["fd00:10::/56"]}]  # fmt: skip


def test_the_metrics_port_has_a_rule_of_its_own(helm: Helm) -> None:
    rendered = policy(helm, {"podCIDRs": ["10.244.0.0/16"]}, webhook={"metrics": {"enabled": True}})
    metrics = rendered["spec"]["ingress"][1]
    assert metrics == {"ports": [{"port": "metrics", "protocol": "TCP"}]}  # from anyone


def test_match_conditions_are_on_by_default(helm: Helm) -> None:
    config = one(helm.template(), "MutatingWebhookConfiguration")
    for webhook in config["webhooks"]:
        [condition] = webhook["matchConditions"]
        assert condition["name"] == "asks-for-gpus"


def test_the_client_ca_secret_becomes_the_client_ca_file(helm: Helm) -> None:
    values = {"webhook": {"clientCA": {"secretName": "apiserver-client-ca", "key": "ca.pem"}}}
    deployment = one(helm.template(values), "Deployment")
    [webhook] = list(containers(deployment))
    env = {var["name"]: var.get("value") for var in webhook["env"]}
    assert env["VGPU_BRIDGE_CLIENT_CA_FILE"] == "/etc/vgpu-bridge/client-ca/ca.crt"
    mount = {m["name"]: m["mountPath"] for m in webhook["volumeMounts"]}
    assert mount["client-ca"] == "/etc/vgpu-bridge/client-ca"
    volume = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    items = [{"key": "ca.pem", "path": "ca.crt"}]
    assert volume["client-ca"]["secret"] == {"secretName": "apiserver-client-ca", "items": items}
    default = one(helm.template(), "Deployment")
    assert "VGPU_BRIDGE_CLIENT_CA_FILE" not in str(default)
