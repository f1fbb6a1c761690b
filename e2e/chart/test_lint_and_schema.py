"""helm lint passes, and values the chart cannot honour fail with a message naming the problem."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.chart.rendering import Helm

pytestmark = pytest.mark.e2e

EVERYTHING_ON: dict[str, Any] = {
    "volcano": {"enabled": True, "version": "v1.15.1"},
    "kai": {"enabled": True, "version": "v0.18.0"},
    "agent": {"mockGpus": [{"uuid": "GPU-0", "productName": "NVIDIA H100", "memory": "80Gi"}]},
    "metrics": {"service": {"type": "NodePort"}},
    "webhook": {"metrics": {"enabled": True}},
}


@pytest.mark.parametrize(
    "values",
    [{}, EVERYTHING_ON, {"tls": {"mode": "cert-manager"}}],
    ids=["defaults", "volcano-kai-mock-gpus-nodeport-webhook-metrics", "cert-manager"],
)
def test_helm_lint_strict_passes(helm: Helm, values: dict[str, Any]) -> None:
    out = helm.lint(values)
    assert "1 chart(s) linted, 0 chart(s) failed" in out


SCHEMA_REFUSALS = [
    ("replicas-not-a-number", {"webhook": {"replicas": "two"}}, "replicas"),
    ("replicas-zero", {"webhook": {"replicas": 0}}, "replicas"),
    ("unknown-tls-mode", {"tls": {"mode": "acme"}}, "mode"),
    ("misspelt-key", {"webhook": {"replica": 3}}, "replica"),
    ("cores-over-100", {"webhook": {"settings": {"defaultCores": 101}}}, "defaultCores"),
    ("unknown-profile", {"webhook": {"settings": {"profile": "acme"}}}, "profile"),
    (
        "mock-gpu-memory-not-a-quantity",
        {"agent": {"mockGpus": [{"uuid": "u", "productName": "p", "memory": "lots"}]}},
        "memory",
    ),
    (
        "mock-gpu-without-uuid",
        {"agent": {"mockGpus": [{"productName": "p", "memory": "1Gi"}]}},
        "uuid",
    ),
    ("node-port-out-of-range", {"metrics": {"service": {"nodePort": 8080}}}, "nodePort"),
    ("relative-cdi-dir", {"agent": {"cdiDir": "var/run/cdi"}}, "cdiDir"),
    ("env-not-ours", {"agent": {"extraEnv": [{"name": "LD_PRELOAD", "value": "x"}]}}, "name"),
    ("failure-policy", {"webhook": {"failurePolicy": "Maybe"}}, "failurePolicy"),
    ("volcano-version", {"volcano": {"version": "1.15"}}, "version"),
    ("webhook-metrics-port-privileged", {"webhook": {"metrics": {"port": 80}}}, "port"),
    ("webhook-metrics-misspelt", {"webhook": {"metrics": {"enable": True}}}, "enable"),
    ("driver-name-not-a-dns-subdomain", {"driverName": "GPU/Example"}, "driverName"),
    ("driver-name-empty", {"driverName": ""}, "driverName"),
]


@pytest.mark.parametrize(
    ("values", "names"), [case[1:] for case in SCHEMA_REFUSALS], ids=[c[0] for c in SCHEMA_REFUSALS]
)
def test_values_schema_refuses_with_the_field_named(
    helm: Helm, values: dict[str, Any], names: str
) -> None:
    message = helm.template_error(values)
    assert "values don't meet the specifications of the schema" in message
    assert names in message


VALIDATION_REFUSALS = [
    ("default-namespace", {}, "default", "namespace of its own"),
    (
        "name-after-kai",
        {"kai": {"enabled": True}, "webhook": {"configurationName": "vgpu-bridge"}},
        "vgpu-bridge",
        'must sort before KAI\'s "mutating-kai-admission"',
    ),
    (
        "kai-counts-shares-but-the-class-says-no-gpu",
        {"kai": {"enabled": True}, "driverName": "shares.accel.example.com"},
        "vgpu-bridge",
        'DeviceClass "shares.accel.example.com" has no "gpu" in its name',
    ),
    (
        "kai-counts-no-shares-but-a-class-says-gpu",
        {
            "kai": {"enabled": True, "sharesCountAsGpus": False},
            "driverName": "shares.accel.example.com",
            "deviceClasses": [{"name": "h100.gpu.example.com", "selectors": []}],
        },
        "vgpu-bridge",
        'DeviceClass "h100.gpu.example.com" has "gpu" in its name',
    ),
    (
        "name-after-volcano",
        {"volcano": {"enabled": True}, "webhook": {"configurationName": "zz-gpu"}},
        "vgpu-bridge",
        "volcano-admission-service",
    ),
    (
        "hami-profile-with-our-agent",
        {"webhook": {"settings": {"profile": "hami"}}},
        "vgpu-bridge",
        "agent.enabled=false",
    ),
    ("secret-mode-without-secret", {"tls": {"mode": "secret"}}, "vgpu-bridge", "tls.secretName"),
    (
        "webhook-metrics-on-the-https-port",
        {"webhook": {"port": 9000, "metrics": {"enabled": True, "port": 9000}}},
        "vgpu-bridge",
        "webhook.metrics.port 9000 is webhook.port",
    ),
    (
        "nothing-enabled",
        {"webhook": {"enabled": False}, "agent": {"enabled": False}},
        "vgpu-bridge",
        "nothing to install",
    ),
]


@pytest.mark.parametrize(
    ("values", "namespace", "reason"),
    [case[1:] for case in VALIDATION_REFUSALS],
    ids=[c[0] for c in VALIDATION_REFUSALS],
)
def test_combinations_that_cannot_work_fail_with_the_reason(
    helm: Helm, values: dict[str, Any], namespace: str, reason: str
) -> None:
    message = helm.template_error(values, namespace=namespace)
    assert reason in message, message
