"""A restarted webhook replica loads only what answering reviews needs: the CLI builds the
webhook's flags alone, its settings and core's values are plain dataclasses (no pydantic, which
alone took longer than the rest of a start), and the Kubernetes client, prometheus_client and
structlog load after the server is up, in the background (log lines are kept until then).
Checked in a fresh interpreter, as the binary starts, up to the answer to a GPU review that core
translates."""

from __future__ import annotations

import subprocess
import sys

import pytest

START_PATH = """
import contextlib, io, sys
from vgpu_bridge import cli, logs
logs.configure_json_logging(defer=True)  # as webhook.app.serve does
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    cli.main(["webhook", "--help"])
import json
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.webhook.app import build
from vgpu_bridge.webhook.settings import Settings
api = KubeApi.connect_on_first_use("/nonexistent/kubeconfig")
admitter, _, _ = build(Settings(listen="127.0.0.1:0", tls_cert_file="-", tls_key_file="-"), api)
container = {"name": "main", "resources": {"limits": {"nvidia.com/gpumem": 3000}}}
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"containers": [container]}}
request = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "operation": "CREATE", "namespace": "team-a", "object": pod, "dryRun": True}
review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
status, body = admitter.review_body(json.dumps(review).encode())
assert status == 200 and "patch" in json.loads(body)["response"], body
print(" ".join(sorted(sys.modules)))
"""


@pytest.fixture(scope="module")
def loaded() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", START_PATH], capture_output=True, text=True, check=True
    )
    return set(done.stdout.split())


@pytest.mark.parametrize(
    "module",
    [
        pytest.param("kubernetes", id="the-kubernetes-client"),
        pytest.param("urllib3", id="its-connection-pool"),
        pytest.param("tenacity", id="the-api-retry-library"),
        pytest.param("yaml", id="the-translate-commands-yaml-reader"),
        pytest.param("vgpu_bridge.translate_command", id="the-translate-command"),
        pytest.param("vgpu_bridge.node.settings", id="the-node-agents-settings"),
        pytest.param("prometheus_client", id="the-metrics-library"),
        pytest.param("structlog", id="the-logging-library"),
        pytest.param("pydantic", id="the-model-library"),
        pytest.param("pydantic_core", id="its-validator"),
        pytest.param("vgpu_bridge.webhook.events", id="the-event-recorder"),
        pytest.param("cryptography", id="the-certificate-library-of-tls-secret"),
        pytest.param("vgpu_bridge.webhook.cert_keeper", id="the-certificate-keeper"),
    ],
)
def test_the_webhook_start_path_does_not_import(module: str, loaded: set[str]) -> None:
    assert module not in loaded


def test_the_start_path_is_the_webhooks(loaded: set[str]) -> None:
    assert {"vgpu_bridge.webhook.app", "vgpu_bridge.webhook.settings"} <= loaded
