"""An Admitter as the webhook wires one, over the recording API server."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.unit.recording_api import RecordingApi
from vgpu_bridge.adapters import default_registry
from vgpu_bridge.core import DEFAULT, DriverProfile, Inventory, TranslatorConfig
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.metrics import WebhookMetrics
from vgpu_bridge.webhook.quotas import QuotaGate
from vgpu_bridge.webhook.settings import Settings
from vgpu_bridge.webhook.templates import TemplateStore


def admitter_over(
    recorded: RecordingApi,
    *,
    inventory: Callable[[], Inventory] = Inventory,
    config: TranslatorConfig | None = None,
    store: TemplateStore | None = None,
    quotas: QuotaGate | None = None,
    profile: DriverProfile = DEFAULT,
) -> Admitter:
    settings = Settings(listen="127.0.0.1:0", tls_cert_file="unused", tls_key_file="unused")
    return Admitter(
        settings=settings,
        registry=default_registry(),
        profile=profile,
        config=config or TranslatorConfig(),
        inventory=inventory,
        store=store or TemplateStore(recorded.api, grace_s=600),
        api=recorded.api,
        metrics=WebhookMetrics(),
        quotas=quotas,
    )


def pod_response(
    admitter: Admitter, obj: dict[str, Any], *, namespace: str = "team-a", dry_run: bool = False
) -> dict[str, Any]:
    """The AdmissionReview response to a Pod's CREATE of `obj` in `namespace`."""
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    request = {"uid": "u-1", "kind": kind, "operation": "CREATE", "namespace": namespace,
               "object": obj, "dryRun": dry_run}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    status, data = admitter.review_body(json.dumps(body).encode())
    assert status == 200, data
    response: dict[str, Any] = json.loads(data)["response"]
    return response
