"""One admission: pick the adapter, translate, ensure the templates, answer. Logged and counted."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from vgpu_bridge.adapters import AdapterRegistry
from vgpu_bridge.core import (
    DriverProfile,
    InvalidRequest,
    Inventory,
    TranslationContext,
    TranslatorConfig,
)
from vgpu_bridge.core.names import TRANSLATED_LABEL
from vgpu_bridge.core.workloads import pod_templates
from vgpu_bridge.kube import KubeApi, KubeError
from vgpu_bridge.webhook import review
from vgpu_bridge.webhook.fastpath import may_ask_for_gpus
from vgpu_bridge.webhook.metrics import WebhookMetrics
from vgpu_bridge.webhook.settings import Settings
from vgpu_bridge.webhook.templates import TemplateConflict, TemplateStore

log = structlog.get_logger("vgpu_bridge.webhook")
RESOURCE_API = "/apis/resource.k8s.io/v1/namespaces/{ns}"
CLAIM_PATHS = {
    "resourceClaimTemplateName": RESOURCE_API + "/resourceclaimtemplates/{name}",
    "resourceClaimName": RESOURCE_API + "/resourceclaims/{name}",
}


@dataclass(slots=True)
class _Outcome:
    decision: str  # translated | unchanged | denied
    body: bytes
    adapter: str = "-"
    templates: list[str] = field(default_factory=list)


@dataclass
class Admitter:
    """Answers AdmissionReviews; the HTTP server only moves bytes to and from `review_body`."""

    settings: Settings
    registry: AdapterRegistry
    profile: DriverProfile
    config: TranslatorConfig
    inventory: Callable[[], Inventory]
    store: TemplateStore
    api: KubeApi
    metrics: WebhookMetrics
    legacy_warnings: list[str] = field(default_factory=list)

    def review_body(self, body: bytes) -> tuple[int, bytes]:
        """(HTTP status, body) for one POST /mutate."""
        start = time.perf_counter()
        try:
            request = review.parse_review(body)
        except review.BadReview as exc:
            self.metrics.admissions.labels("bad-request").inc()
            return 400, str(exc).encode()
        try:
            outcome = self._admit(request)
        except Exception:
            log.exception("admission failed", uid=request.uid, namespace=request.namespace)
            self.metrics.admissions.labels("error").inc()
            return 500, b"internal error"
        elapsed = time.perf_counter() - start
        self.metrics.admissions.labels(outcome.decision).inc()
        self.metrics.latency.observe(elapsed)
        meta = request.object.get("metadata") or {}
        log.info(
            "admission",
            uid=request.uid,
            namespace=request.namespace,
            name=meta.get("name") or meta.get("generateName"),
            kind=request.kind,
            operation=request.operation,
            adapter=outcome.adapter,
            decision=outcome.decision,
            templates=outcome.templates,
            dry_run=request.dry_run,
            duration_ms=round(elapsed * 1000, 3),
        )
        return 200, outcome.body

    def _skipped(self, request: review.AdmissionRequest, namespace: str | None) -> bool:
        labels = (request.object.get("metadata") or {}).get("labels") or {}
        if (
            namespace in self.settings.excluded()
            or labels.get(self.settings.opt_out_label) == "true"
        ):
            return True
        if request.operation == "UPDATE":  # a pod's claims are immutable; translated ones are done
            return request.kind == "Pod" or labels.get(TRANSLATED_LABEL) == "true"
        return request.operation != "CREATE" or not request.object

    def _admit(self, request: review.AdmissionRequest) -> _Outcome:
        meta = request.object.get("metadata") or {}
        namespace = request.namespace or meta.get("namespace")
        if self._skipped(request, namespace):
            return _Outcome("unchanged", review.allow(request.uid))
        if not may_ask_for_gpus(request.kind, request.object):  # the fast path: no GPU key
            return _Outcome("unchanged", review.allow(request.uid))
        obj = {**request.object, "metadata": {**meta, "namespace": namespace}}
        adapter = self.registry.pick(obj, self.settings.scheduler)
        context = TranslationContext(
            config=self.config, profile=self.profile, inventory=self.inventory()
        )
        try:
            plan = adapter.translate(obj, context=context)
        except InvalidRequest as exc:
            return _Outcome("denied", review.deny(request.uid, exc.lines()), adapter.name)
        if not plan.changes_object:
            return _Outcome(
                "unchanged", review.allow(request.uid, warnings=plan.warnings), adapter.name
            )
        names = [t["metadata"]["name"] for t in plan.templates]
        reasons = self._mixed_claims(obj, str(namespace))
        if not reasons and not request.dry_run:
            try:
                self.store.ensure(str(namespace), plan.templates)
            except TemplateConflict as exc:
                reasons = [str(exc)]
        if reasons:
            return _Outcome("denied", review.deny(request.uid, reasons), adapter.name, names)
        warnings = [*plan.warnings, *self.legacy_warnings]
        body = review.allow(request.uid, patch=plan.patch, warnings=warnings)
        return _Outcome("translated", body, adapter.name, names)

    def _mixed_claims(self, obj: Mapping[str, Any], namespace: str) -> list[str]:
        """A pod that already claims devices of our class beside translated requests is refused."""
        reasons = []
        for template in pod_templates(obj):
            for index, claim in enumerate(template.spec.get("resourceClaims") or ()):
                if isinstance(claim, Mapping) and self._claims_our_class(claim, namespace):
                    reasons.append(
                        f"{template.spec_path}.resourceClaims[{index}]: already claims devices of "
                        f"class {self.profile.device_class}; state GPU requests one way"
                    )
        return reasons

    def _claims_our_class(self, claim: Mapping[str, Any], namespace: str) -> bool:
        for key, path in CLAIM_PATHS.items():
            name = claim.get(key)
            if not name:
                continue
            try:
                found = self.api.get(path.format(ns=namespace, name=name))
            except KubeError as exc:
                if exc.status == 404:
                    return False
                raise
            spec = found.get("spec", {})
            spec = spec.get("spec", spec)  # a template wraps the claim spec once more
            requests = spec.get("devices", {}).get("requests") or []
            classes = {r.get("exactly", {}).get("deviceClassName") for r in requests}
            classes |= {
                s.get("deviceClassName") for r in requests for s in r.get("firstAvailable") or ()
            }
            return self.profile.device_class in classes
        return False
