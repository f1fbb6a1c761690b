"""Our webhook as KAI clusters run it, KAI's mutating webhook as a recording stand-in, and a
create call that returns the API server's warnings."""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.cluster.client import ApiError, Json, KubeClient
from e2e.waiting import wait_for
from e2e.webhook.process import CONFIGS, WebhookProcess, free_port, running_webhook
from tests.tls import write_self_signed

#: Namespaces opt in to one of our KAI webhooks with this label; its value picks which one.
NAMESPACE_LABEL = "e2e.vgpu-bridge.io/kai-webhook"
#: KAI's operator names its mutating webhook configuration so (kai.md §4.1).
KAI_CONFIG = "mutating-kai-admission"
#: What docs/kai.md tells operators to call ours: it sorts before every letter-named configuration.
OUR_CONFIG_PREFIX = "00-vgpu-bridge"


def selector(value: str) -> Json:
    return {"matchLabels": {NAMESPACE_LABEL: value}}


@contextmanager
def our_webhook(
    kube: KubeClient,
    kubeconfig: Path,
    workdir: Path,
    *,
    config_name: str,
    namespace_value: str,
    args: Sequence[str] = (),
) -> Iterator[WebhookProcess]:
    """`vgpu-bridge webhook ARGS...`, registered as `config_name` for namespaces labelled
    `NAMESPACE_LABEL=namespace_value`; stopped and unregistered afterwards."""
    with running_webhook(
        kube,
        kubeconfig,
        workdir,
        grace_s=None,
        namespace_selector=selector(namespace_value),
        config_name=config_name,
        extra_args=args,
    ) as webhook:
        yield webhook


@dataclass
class KaiAdmissionRecorder:
    """Stands in for KAI's `/mutate--v1-pod`: records each pod it is shown and allows it
    unchanged. Registered like KAI's operator registers the real one (kai.md §4.1)."""

    seen: list[Json] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, pod: Json) -> None:
        with self.lock:
            self.seen.append(pod)

    def pods_named(self, namespace: str, name: str) -> list[Json]:
        with self.lock:
            return [
                p
                for p in self.seen
                if p["metadata"].get("namespace") == namespace
                and p["metadata"].get("name", "") == name
            ]


def kai_configuration(port: int, cert_file: Path) -> Json:
    """KAI's mutating webhook as its operator writes it (pkg/operator/operands/admission),
    limited to the namespaces of these tests."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": KAI_CONFIG},
        "webhooks": [
            {
                "name": "pod-mutator.kai.scheduler",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "namespaceSelector": {
                    "matchExpressions": [{"key": NAMESPACE_LABEL, "operator": "Exists"}]
                },
                "matchConditions": [
                    {
                        "name": "scheduler-name-match",
                        "expression": "object.spec.schedulerName == 'kai-scheduler'",
                    }
                ],
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/mutate--v1-pod",
                    "caBundle": base64.b64encode(cert_file.read_bytes()).decode(),
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
            }
        ],
    }


@contextmanager
def kai_admission_recorder(kube: KubeClient, workdir: Path) -> Iterator[KaiAdmissionRecorder]:
    workdir.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = write_self_signed(workdir)
    recorder = KaiAdmissionRecorder()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            review: Json = json.loads(self.rfile.read(length))
            request = review["request"]
            pod = request["object"]
            pod["metadata"].setdefault("namespace", request.get("namespace"))
            recorder.record(pod)
            answer = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": request["uid"], "allowed": True},
            }
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert_file), str(key_file))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        kube.create(CONFIGS, kai_configuration(port, cert_file))
        yield recorder
    finally:
        kube.delete(f"{CONFIGS}/{KAI_CONFIG}")
        server.shutdown()
        server.server_close()


def create_with_warnings(kube: KubeClient, path: str, body: Json) -> tuple[Json, list[str]]:
    """POST `body`; the created object and the `Warning` headers (what kubectl prints)."""
    context = ssl.create_default_context(cafile=str(kube.ca_file))
    context.load_cert_chain(str(kube.client.cert), str(kube.client.key))
    connection = http.client.HTTPSConnection(
        kube.host, kube.port, context=context, timeout=kube.timeout_s
    )
    try:
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        connection.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        response = connection.getresponse()
        text = response.read().decode()
        warnings = response.headers.get_all("Warning") or []
    finally:
        connection.close()
    if response.status >= 400:
        raise ApiError("POST", path, response.status, text)
    created: Json = json.loads(text)
    return created, [_warning_text(w) for w in warnings]


def _warning_text(header: str) -> str:
    """`299 - "text"` → `text` (RFC 7234 warn-code, agent, quoted text)."""
    _, _, quoted = header.partition(" - ")
    return quoted.strip().strip('"').replace('\\"', '"')


def label_namespace(
    kube: KubeClient, namespace: str, value: str, recorder: KaiAdmissionRecorder
) -> None:
    """Put `namespace` under our webhook `value` and the KAI stand-in, and wait until a dry run
    passes through both there: the API server loads configurations asynchronously."""
    labels = {"metadata": {"labels": {NAMESPACE_LABEL: value}}}
    kube.patch(f"/api/v1/namespaces/{namespace}", labels)
    container = {
        "name": "main",
        "image": "registry.invalid/e2e/no-image:never-pulled",
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"containers": [container], "schedulerName": "kai-scheduler"},
    }

    def answering() -> bool:
        try:
            created = kube.request(
                "POST", f"/api/v1/namespaces/{namespace}/pods", body=probe, query={"dryRun": "All"}
            )
        except ApiError as error:
            return "KAI" in error.body  # refused by our version gate, before KAI is called
        ours = "resourceClaims" in created["spec"]
        return ours and bool(recorder.pods_named(namespace, "probe"))

    wait_for(answering, timeout_s=20, what=f"our webhook to answer in {namespace}")
