"""An Admitter as the webhook wires one, over the recording API server."""

from __future__ import annotations

from collections.abc import Callable

from tests.unit.recording_api import RecordingApi
from vgpu_bridge.adapters import default_registry
from vgpu_bridge.core import DEFAULT, Inventory, TranslatorConfig
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
) -> Admitter:
    settings = Settings(listen="127.0.0.1:0", tls_cert_file="unused", tls_key_file="unused")
    return Admitter(
        settings=settings,
        registry=default_registry(),
        profile=DEFAULT,
        config=config or TranslatorConfig(),
        inventory=inventory,
        store=store or TemplateStore(recorded.api, grace_s=600),
        api=recorded.api,
        metrics=WebhookMetrics(),
        quotas=quotas,
    )
