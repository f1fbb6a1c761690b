"""Our webhook as a real process on 127.0.0.1, registered with the local API server."""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.client import Json, KubeClient
from e2e.processes import stop_process
from e2e.waiting import wait_for
from tests.tls import write_self_signed

NAMESPACE_LABEL = "e2e.vgpu-bridge.io/webhook"
CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class WebhookProcess:
    port: int
    cert_file: Path
    log_file: Path

    def ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.cert_file))
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=2)
            conn.request("GET", "/readyz")
            ok = conn.getresponse().status == 200
            conn.close()
        except OSError:
            return False
        return ok

    def log(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""


def configuration(
    name: str,
    webhook: WebhookProcess,
    *,
    namespace_label: str = NAMESPACE_LABEL,
    namespace_selector: Json | None = None,
    workloads: bool = True,
) -> Json:
    """Our registration as the chart writes it, for namespaces matching `namespace_selector`
    (default: labelled ``namespace_label=true``); `workloads` as the chart's
    ``webhook.workloads`` (False, the chart's default: only pods and Volcano's objects)."""
    ca_bundle = base64.b64encode(webhook.cert_file.read_bytes()).decode()
    pods = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE"],
        "resources": ["pods"],
    }
    kinds = {"apps": ["deployments", "statefulsets", "daemonsets", "replicasets"],
             "batch": ["jobs", "cronjobs"]}  # fmt: skip
    rules = [pods] + [
        {"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
         "resources": plurals}
        for group, plurals in kinds.items()
        if workloads
    ]  # fmt: skip
    rules += [
        {
            "apiGroups": ["batch.volcano.sh"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["jobs"],
        },
        {
            "apiGroups": ["scheduling.volcano.sh"],
            "apiVersions": ["v1beta1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["podgroups"],
        },
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "translate.vgpu-bridge.io",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{webhook.port}/mutate",
                    "caBundle": ca_bundle,
                },
                "rules": rules,
                "namespaceSelector": namespace_selector
                or {"matchLabels": {namespace_label: "true"}},
                "failurePolicy": "Fail",
                "sideEffects": "NoneOnDryRun",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }
        ],
    }


@contextmanager
def running_webhook(
    kube: KubeClient,
    kubeconfig: Path,
    workdir: Path,
    *,
    grace_s: int | None,
    namespace_label: str = NAMESPACE_LABEL,
    namespace_selector: Json | None = None,
    config_name: str | None = None,
    extra_args: Sequence[str] = (),
    workloads: bool = True,
) -> Iterator[WebhookProcess]:
    """Start `vgpu-bridge webhook`, wait for /readyz, register it; undo all of it afterwards.

    It is called for namespaces labelled ``namespace_label=true`` (another e2e package passes its
    own label, so two webhook processes of one session never both mutate one namespace), or those
    `namespace_selector` matches; registered as `config_name` (default: a name that sorts before
    Volcano's and KAI's). `grace_s` sets the template sweeper's grace with a 1 s interval (None:
    the webhook's defaults); ``extra_args`` go to the command line (e.g. ``--volcano-version``);
    ``workloads`` registers the workload kinds too (``configuration``).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = write_self_signed(workdir)
    webhook = WebhookProcess(free_port(), cert_file, workdir / "webhook.log")
    sweep = (
        []
        if grace_s is None
        else [
            "--sweep-grace-seconds",
            str(grace_s),
            "--sweep-interval-seconds",
            "1",
        ]
    )
    command = [
        sys.executable, "-m", "vgpu_bridge.cli", "webhook",
        "--listen", f"127.0.0.1:{webhook.port}",
        "--tls-cert-file", str(cert_file), "--tls-key-file", str(key_file),
        "--kubeconfig", str(kubeconfig), *sweep, *extra_args,
    ]  # fmt: skip
    with webhook.log_file.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    name = config_name or f"gpu-sharing-e2e-{webhook.port}"
    body = configuration(
        name,
        webhook,
        namespace_label=namespace_label,
        namespace_selector=namespace_selector,
        workloads=workloads,
    )
    try:
        wait_for(
            lambda: process.poll() is None and webhook.ready(), timeout_s=30, what="webhook ready"
        )
        kube.create(CONFIGS, body)
        time.sleep(1.5)  # the API server picks up new webhook configurations asynchronously
        yield webhook
    finally:
        kube.delete(f"{CONFIGS}/{name}")
        stop_process(process)
