"""One admission: pick the adapter, translate, ensure the templates, answer. Logged and counted."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from vgpu_bridge.adapters import AdapterRegistry
from vgpu_bridge.core import (
    ENFORCER_REQUEST,
    DriverProfile,
    InvalidRequest,
    Inventory,
    Plan,
    TranslationContext,
    TranslatorConfig,
)
from vgpu_bridge.core.errors import FieldError
from vgpu_bridge.core.guardrails import check_claims_per_container, check_pod, several_claims
from vgpu_bridge.core.models import Problems
from vgpu_bridge.core.shapes import check_shape
from vgpu_bridge.core.workloads import PodTemplate, object_ref, pod_templates
from vgpu_bridge.kube import KubeApi, dns_label_problem, dns_subdomain_problem
from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook import review
from vgpu_bridge.webhook.claim_lookup import CLAIM_RESOURCES, Claimed, ClaimLookup
from vgpu_bridge.webhook.enforced import unenforced_resource_names, unenforced_resources
from vgpu_bridge.webhook.fastpath import (
    gpu_key_markers,
    lists_resource,
    may_ask_for_gpus,
    may_name_gpus,
    quick_sized,
)
from vgpu_bridge.webhook.metrics import WebhookMetrics
from vgpu_bridge.webhook.quotas import QuotaGate
from vgpu_bridge.webhook.settings import Settings
from vgpu_bridge.webhook.templates import TemplateConflict, TemplateStore

if TYPE_CHECKING:  # attached once the client has loaded (webhook.app.api_workers)
    from vgpu_bridge.webhook.events import EventRecorder
    from vgpu_bridge.webhook.prevalidate import Prevalidator, Verdict

log = get_logger("vgpu_bridge.webhook")


@dataclass(slots=True)
class _Outcome:
    """An admission's decision, its answer, and what its log line and Events say."""

    decision: str  # translated | unchanged | denied
    body: bytes
    adapter: str = "-"
    templates: list[str] = field(default_factory=list)
    plan: Plan | None = None
    reasons: list[str] = field(default_factory=list)  # of a denial
    warnings: list[str] = field(default_factory=list)


def _denied(
    uid: str, reasons: list[str], adapter: str = "-", templates: list[str] | None = None
) -> _Outcome:
    body = review.deny(uid, reasons)
    return _Outcome("denied", body, adapter, templates or [], reasons=reasons)


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
    quotas: QuotaGate | None = None  # HAMi's namespace GPU quotas; None: not enforced
    events: EventRecorder | None = None  # Events about decisions; None: none posted
    prevalidator: Prevalidator | None = None  # reads big reviews first, in a child process

    @cached_property
    def _gpu_key_markers(self) -> tuple[bytes, ...]:
        return gpu_key_markers(self.config.resource_names())

    @cached_property
    def _renamed(self) -> frozenset[str]:
        """HAMi's resource names as configured, made once for `may_ask_for_gpus`."""
        return frozenset(self.config.resource_names())

    @cached_property
    def _unenforced_names(self) -> tuple[str, ...]:
        """Extended resources that would get a share without our enforcer (profile nvidia)."""
        return unenforced_resource_names(self.profile, self.config)

    @cached_property
    def _excluded(self) -> frozenset[str]:
        """The namespaces never looked at, read from the (frozen) settings once."""
        return self.settings.excluded()

    def review_body(self, body: bytes) -> tuple[int, bytes]:
        """(HTTP status, body) for one POST /mutate."""
        if self.prevalidator is not None:
            start = time.perf_counter()
            verdict = self.prevalidator.verdict(body)
            if verdict is not None:
                return self._prevalidated(verdict, start)
        answer = self._answer(body, quick=False)
        assert answer is not None  # only a quick answer gives up
        return answer

    def quick_review_body(self, body: bytes) -> tuple[int, bytes] | None:
        """The answer to a POST /mutate that needs no translation and no API call (a pod without
        GPUs, an object we skip, a malformed review), in time bounded by the body's size; None:
        take `review_body` on a worker. A body naming a GPU key anywhere goes there unread: it
        would be read twice."""
        if may_name_gpus(body, markers=self._gpu_key_markers):
            return None
        return self._answer(body, quick=True)

    def _answer(self, body: bytes, *, quick: bool) -> tuple[int, bytes] | None:
        start = time.perf_counter()
        try:
            request = review.parse_review(body)
        except review.BadReview as exc:
            self.metrics.admissions.labels("bad-request").inc()
            return 400, str(exc).encode()
        try:
            outcome = self._admit(request, quick=quick)
            if outcome is None:
                return None
        except Exception:
            log.exception("admission failed", uid=review.logged(request.uid),
                          namespace=review.logged(request.namespace))  # fmt: skip
            self.metrics.admissions.labels("error").inc()
            return 500, b"internal error"
        return self._finish(request, outcome, start)

    def _prevalidated(self, verdict: Verdict, start: float) -> tuple[int, bytes]:
        """The answer to a review the prevalidator refused or could not read, as `_answer`
        would give it."""
        if verdict.request is None:
            self.metrics.admissions.labels("bad-request").inc()
            return 400, str(verdict.bad).encode()
        outcome = _denied(verdict.request.uid, list(verdict.reasons))
        return self._finish(verdict.request, outcome, start)

    def _finish(
        self, request: review.AdmissionRequest, outcome: _Outcome, start: float
    ) -> tuple[int, bytes]:
        """Count, log and tell the outcome; its answer."""
        elapsed = time.perf_counter() - start
        self.metrics.admissions.labels(outcome.decision).inc()
        self.metrics.latency.observe(elapsed)
        meta = request.object.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        log.info(
            "admission",
            uid=review.logged(request.uid),
            namespace=review.logged(request.namespace),
            name=review.logged(meta.get("name") or meta.get("generateName")),
            kind=review.logged(request.kind),
            operation=review.logged(request.operation),
            adapter=outcome.adapter,
            decision=outcome.decision,
            templates=outcome.templates,
            dry_run=request.dry_run,
            duration_ms=round(elapsed * 1000, 3),
        )
        try:
            self._tell(request, outcome)
        except Exception:  # an Event is never worth failing or delaying the admission
            log.exception("cannot queue events", uid=review.logged(request.uid),
                          namespace=review.logged(request.namespace))  # fmt: skip
        return 200, outcome.body

    def _tell(self, request: review.AdmissionRequest, outcome: _Outcome) -> None:
        """Queue the Events of this decision (never for a dry run: it must write nothing)."""
        quiet = outcome.decision == "unchanged" and not outcome.warnings
        if self.events is None or request.dry_run or quiet:
            return
        from vgpu_bridge.webhook.event_notes import Admitted, occurrences  # loaded with events

        meta = request.object.get("metadata")
        namespace = request.namespace or (meta.get("namespace") if isinstance(meta, dict) else None)
        admitted = Admitted(uid=request.uid, object=request.object, namespace=namespace,
                            decision=outcome.decision, plan=outcome.plan,
                            reasons=outcome.reasons, warnings=outcome.warnings)  # fmt: skip
        self.events.record(occurrences(admitted, profile=self.profile))

    def _skipped(self, request: review.AdmissionRequest, namespace: str | None) -> bool:
        """Objects we never look at: excluded, a Pod's UPDATE (its claims are immutable), an
        object being deleted (a refusal would keep its finalizers), and every operation but
        CREATE and UPDATE. A workload's UPDATE is translated like its CREATE: re-applied from
        Git, it carries our earlier claims beside its GPU requests again, which core translates
        afresh (`core.earlier`); without GPU requests it needs nothing. An object that opted out
        is not skipped: it is only left untranslated (`_untranslated`)."""
        meta = request.object.get("metadata") or {}
        if namespace in self._excluded:
            return True
        if request.operation == "UPDATE":
            return request.kind == "Pod" or meta.get("deletionTimestamp") is not None
        return request.operation != "CREATE" or not request.object

    def _opted_out(self, request: review.AdmissionRequest) -> bool:
        """Labelled to be left untranslated; what it claims is still checked."""
        labels = (request.object.get("metadata") or {}).get("labels") or {}
        return bool(labels.get(self.settings.opt_out_label) == "true")

    def _admit(self, request: review.AdmissionRequest, *, quick: bool = False) -> _Outcome | None:
        """The decision; None when `quick` and it would take a translation or an API call, or
        has too many containers to look at on the selector thread."""
        if quick and not quick_sized(request.object):
            return None
        try:
            check_shape(request.object)  # every field read below has its type
        except InvalidRequest as exc:
            return _denied(request.uid, exc.lines())
        meta = request.object.get("metadata") or {}
        namespace = request.namespace or meta.get("namespace")
        if self._skipped(request, namespace):
            return _Outcome("unchanged", review.allow(request.uid))
        if self._opted_out(request) or not may_ask_for_gpus(
            request.kind, request.object, resource_names=self._renamed
        ):
            unenforced = self._unenforced_resource_reasons(request.object)
            if unenforced:
                return _denied(request.uid, unenforced)
            counts = self._quota_counts(request, request.object)
            if not counts and not _names_claims(request.object):
                return _Outcome("unchanged", review.allow(request.uid))  # as _untranslated's
            obj = {**request.object, "metadata": {**meta, "namespace": namespace}}
            claims = self._claim_lookup()
            return self._untranslated(request, namespace, obj, claims, quick=quick, counts=counts)
        if quick:
            return None
        obj = {**request.object, "metadata": {**meta, "namespace": namespace}}
        claims = self._claim_lookup()
        adapter = self.registry.pick(obj, self.settings.scheduler)
        context = TranslationContext(
            config=self.config, profile=self.profile, inventory=self.inventory()
        )
        try:
            plan = adapter.translate(obj, context=context)
        except InvalidRequest as exc:
            return _denied(request.uid, exc.lines(), adapter.name)
        if not plan.changes_object:
            unenforced = self._unenforced_resource_reasons(obj)
            if unenforced:
                return _denied(request.uid, unenforced, adapter.name)
            return self._untranslated(
                request, namespace, obj, claims, adapter=adapter.name, warnings=list(plan.warnings)
            )
        names = [t["metadata"]["name"] for t in plan.templates]
        unenforced = self._unenforced_patched_reasons(plan, obj)
        if unenforced:
            return _denied(request.uid, unenforced, adapter.name, names)
        reasons = self._placement_reasons(plan, namespace, claims, pod=request.kind == "Pod")
        reasons = reasons or self._quota_reasons(request, namespace, obj, plan)
        if not reasons and not request.dry_run:
            try:
                self.store.ensure(str(namespace), plan.templates)
            except TemplateConflict as exc:
                reasons = [str(exc)]
        if reasons:
            return _denied(request.uid, reasons, adapter.name, names)
        warnings = [*plan.warnings, *self.legacy_warnings]
        body = review.allow(request.uid, patch=plan.patch, warnings=warnings)
        return _Outcome("translated", body, adapter.name, names, plan, warnings=warnings)

    def _claim_lookup(self) -> ClaimLookup:
        """One admission's reads of claims; under the nvidia profile a claim of NVIDIA's class
        without our enforcer's request reads as `Claimed.UNENFORCED`."""
        enforcer = self.profile.enforcer_driver
        return ClaimLookup(
            self.api,
            self.profile.device_class,
            enforcer_class=enforcer,
            enforced_driver=self.profile.driver if enforcer else None,
        )

    def _unenforced_resource_reasons(self, obj: Mapping[str, Any]) -> list[str]:
        """Why an object left untranslated is refused under the nvidia profile: it asks for
        NVIDIA's class as an extended resource (webhook.enforced). Pure; [] elsewhere."""
        if not self._unenforced_names:
            return []
        enforcer = str(self.profile.enforcer_driver)
        problems = unenforced_resources(
            obj, self._unenforced_names, device_class=self.profile.device_class, enforcer=enforcer
        )
        return InvalidRequest(object_ref(obj), problems).lines() if problems else []

    def _unenforced_patched_reasons(self, plan: Plan, obj: dict[str, Any]) -> list[str]:
        """`_unenforced_resource_reasons` of the object as the plan leaves it: translation
        leaves keys it does not own as they are (another container's `nvidia.com/gpu` beside a
        renamed HAMi count, the implicit class name). Patched only under the nvidia profile."""
        if not self._unenforced_names:
            return []
        return self._unenforced_resource_reasons(plan.apply_to(obj))

    def _untranslated(
        self,
        request: review.AdmissionRequest,
        namespace: object,
        pod: dict[str, Any],
        claims: ClaimLookup,
        *,
        quick: bool = False,
        adapter: str = "-",
        warnings: list[str] | None = None,
        counts: bool | None = None,
    ) -> _Outcome | None:
        """An object left as it is (opted out, asking for no GPU, or with nothing to translate).
        A pod among them that names claims of our class is held to what a translated GPU pod
        is held to: core's guardrails, then the namespace's GPU quotas. None when `quick` and
        that may read the API. `counts`: `_quota_counts` of the pod, when the caller knows it."""
        counts = self._quota_counts(request, pod) if counts is None else counts
        claimed = request.kind == "Pod" and bool(_claim_refs(pod))
        problems = self._guardrail_problems(pod) if claimed else Problems()
        shared = [(t, n) for t in pod_templates(pod) if (n := several_claims(t))] if claimed else []
        enforced = claimed and self.profile.enforcer_driver is not None
        if quick and ((claimed and (problems or shared or enforced)) or counts):
            return None  # reading its claims or quotas may take the API
        reasons = self._claimed_pod_reasons(namespace, pod, problems, claims)
        reasons = reasons or self._shared_claim_reasons(pod, shared, namespace, claims)
        if enforced:
            reasons = reasons or self._unenforced_claim_reasons(namespace, pod, claims)
        reasons = reasons or self._quota_reasons(request, namespace, pod, counts=counts)
        if reasons:  # e.g. a pod made from a translated template still books its share
            return _denied(request.uid, reasons, adapter)
        body = review.allow(request.uid, warnings=warnings or ())
        return _Outcome("unchanged", body, adapter, warnings=warnings or [])

    def _unenforced_claim_reasons(
        self, namespace: object, pod: dict[str, Any], claims: ClaimLookup
    ) -> list[str]:
        """Why a pod we do not translate is refused under the nvidia profile: it names a claim or
        template of NVIDIA's class without our enforcer's request (a share no one would hold to
        its limits), or one that cannot be read to tell (it could be made so after the pod)."""
        found = _claim_problems(pod, namespace, claims, self._unenforced_claim_reason)
        return InvalidRequest(object_ref(pod), found).lines() if found else []

    def _unenforced_claim_reason(self, claimed: Claimed, resource: str, name: str) -> str | None:
        kind = {"resourceclaims": "ResourceClaim"}.get(resource, "ResourceClaimTemplate")
        device_class, enforcer = self.profile.device_class, self.profile.enforcer_driver
        if claimed is Claimed.UNNAMEABLE:
            problem = dns_subdomain_problem(name)
            return f"{problem}, so whether it asks for {device_class} with our enforcer is unknown"
        if claimed is Claimed.MISSING:
            return (
                f"{kind} {name} does not exist, so whether it asks for {device_class} without a "
                f"request of class {enforcer} cannot be checked; create it before the pod"
            )
        if claimed is not Claimed.UNENFORCED:
            return None
        return (
            f"{kind} {name} asks for devices of class {device_class} without a request of class "
            f"{enforcer}, or carries an opaque config of driver {self.profile.driver}: NVIDIA's "
            "DRA driver enforces no memory or SM limit, and no share without its limits is "
            f"admitted; add the request {ENFORCER_REQUEST} (exactly deviceClassName "
            f"{enforcer}) or ask for GPUs the HAMi way. A config of {self.profile.driver} would "
            "fail Prepare of every other share on the card (NVIDIA prepares shares of one card "
            "only when all their configs are equal): remove it"
        )

    def _claimed_pod_reasons(
        self, namespace: object, pod: dict[str, Any], problems: Problems, claims: ClaimLookup
    ) -> list[str]:
        """Why a pod we do not translate, with `problems` by core's guardrails (privileged
        containers, spec.nodeName), is refused because it names a claim or template of our
        class, however it came to (the opt-out label, a hand-written claim, a template of ours
        named directly). A claim we cannot read counts as ours: it may be made so after the pod.
        Dry runs too: reads only. No problems: no API call."""
        if not problems:
            return []
        why = self._claims_held_to_guardrails(pod, namespace, claims)
        if not why:
            return []
        return InvalidRequest(object_ref(pod), [*problems.errors, *why]).lines()

    def _shared_claim_reasons(
        self,
        obj: Mapping[str, Any],
        shared: list[tuple[PodTemplate, set[str]]],
        namespace: object,
        claims: ClaimLookup,
    ) -> list[str]:
        """Why an untranslated pod is refused for a container that names two claims of our class
        (issue #25 item 3; core's check_claims_per_container). `shared`: each template with the
        claims its containers name two or more of (core's several_claims); only those are read,
        and one that cannot be read counts as ours (it may be made so after the pod). Translated
        pods need no such check: core refuses GPU keys in a container that already names a
        claim of our class."""
        problems = Problems()
        for template, names in shared:
            ours = self._claims_of_our_class(template.spec, names, namespace, claims)
            check_claims_per_container(
                template, ours=ours, device_class=self.profile.device_class, problems=problems
            )
        return InvalidRequest(object_ref(obj), problems.errors).lines() if problems else []

    @staticmethod
    def _claims_of_our_class(
        spec: Mapping[str, Any], names: set[str], namespace: object, claims: ClaimLookup
    ) -> dict[str, str]:
        """Pod-claim name → what it claims, for those of `names` that are ours or cannot be
        read to tell."""
        ours = {}
        for entry in spec.get("resourceClaims") or ():
            name = entry.get("name") if isinstance(entry, Mapping) else None
            if name not in names:
                continue
            for key, resource in CLAIM_RESOURCES.items():
                target = entry.get(key)
                if not isinstance(target, str):
                    continue
                if resource == "resourceclaims":
                    label = f"ResourceClaim {target}"
                else:  # each pod-claim of a template is a claim of its own
                    label = f"{name} (from ResourceClaimTemplate {target})"
                if claims.claimed(resource, namespace, target) is not Claimed.OTHER:
                    ours[str(name)] = label
        return ours

    def _guardrail_problems(self, pod: Mapping[str, Any]) -> Problems:
        problems = Problems()
        for template in pod_templates(pod):
            check_pod(template, config=self.config, problems=problems)
        return problems

    def _claims_held_to_guardrails(
        self, pod: Mapping[str, Any], namespace: object, claims: ClaimLookup
    ) -> list[FieldError]:
        """The claims the pod names that are of our class, or cannot be read to tell."""
        return _claim_problems(pod, namespace, claims, self._guardrail_claim_reason)

    def _guardrail_claim_reason(self, claimed: Claimed, resource: str, name: str) -> str | None:
        kind, device_class = resource[:-1], self.profile.device_class
        if claimed is Claimed.UNNAMEABLE:
            problem = dns_subdomain_problem(name)
            return f"{problem}, so whether it claims devices of class {device_class} is unknown"
        if claimed is Claimed.MISSING:
            return (
                f"{kind} {name} does not exist, so whether it claims devices of class "
                f"{device_class} cannot be checked; create it before the pod"
            )
        if claimed is Claimed.OTHER:
            return None
        return (
            f"{kind} {name} claims devices of class {device_class}, so the pod is held to the "
            f"guardrails of a GPU pod, translated or not ({self.settings.opt_out_label}=true "
            "only skips translation)"
        )

    def _quota_reasons(
        self,
        request: review.AdmissionRequest,
        namespace: object,
        pod: dict[str, Any],
        plan: Plan | None = None,
        *,
        counts: bool | None = None,
    ) -> list[str]:
        """Why creating this pod (as `plan` leaves it) would exceed a GPU quota of its
        namespace. Pods only: a workload's pods are counted as each is created, as Kubernetes
        counts them. A dry run books nothing and is not counted (it needs no API call).
        `counts`: `_quota_counts` of the pod, when the caller knows it."""
        if counts is None:
            counts = self._quota_counts(request, pod, translated=plan is not None)
        if self.quotas is None or not counts:
            return []  # the fast path of a pod without GPUs stays a look at two keys
        if not isinstance(namespace, str) or dns_label_problem(namespace):
            return []  # never put into an API path; the API server refuses the pod
        if plan is None:
            return self.quotas.reasons(namespace, pod, {})
        made = {t["metadata"]["name"]: t["spec"]["spec"] for t in plan.templates}
        return self.quotas.reasons(namespace, plan.apply_to(pod), made)

    def _quota_counts(
        self, request: review.AdmissionRequest, pod: dict[str, Any], *, translated: bool = False
    ) -> bool:
        """Whether this object may book a share against a namespace's quota: a pod (not a dry
        run) that core translated, that names claims, or that asks whole cards of our class as
        an extended resource, while quotas are enforced."""
        if self.quotas is None or request.kind != "Pod" or request.dry_run:
            return False
        if translated or (pod.get("spec") or {}).get("resourceClaims"):
            return True
        names = self.quotas.whole_card_names
        return lists_resource(pod, names) and self.quotas.asks_whole_cards(pod)

    def _placement_reasons(
        self, plan: Plan, namespace: object, claims: ClaimLookup, *, pod: bool
    ) -> list[str]:
        """Why this object's templates and claims cannot be looked up or put in `namespace`.
        `pod`: the object is a Pod (its claims are checked now, not when its pods are made)."""
        problem = dns_label_problem(namespace) if namespace else "required"
        if problem or not isinstance(namespace, str):
            return [f"metadata.namespace: {problem}"]
        return self._mixed_claims(plan, namespace, claims, pod=pod)

    def _mixed_claims(
        self, plan: Plan, namespace: str, claims: ClaimLookup, *, pod: bool
    ) -> list[str]:
        """A pod that already claims devices of our class beside translated requests is refused;
        so is a claim name that is no DNS subdomain: it is never put into an API path. Only the
        pod templates the plan translated are looked at (a Volcano Job's other tasks may claim
        our devices directly). Under the nvidia profile a Pod naming a claim that does not exist
        is refused too, as on the untranslated path: it could be made without our enforcer after
        the pod (a workload's pods are checked as each is made)."""
        missing = pod and self.profile.enforcer_driver is not None
        reasons = []
        for translated in plan.translated:
            template = translated.template
            for index, claim in enumerate(template.spec.get("resourceClaims") or ()):
                path = f"{template.spec_path}.resourceClaims[{index}]"
                reasons += self._claim_reasons(claim, path, namespace, claims, missing=missing)
        return reasons

    def _claim_reasons(
        self,
        claim: Mapping[str, Any],
        path: str,
        namespace: str,
        claims: ClaimLookup,
        *,
        missing: bool,
    ) -> list[str]:
        """`missing`: refuse a claim or template that does not exist (profile nvidia, a Pod)."""
        for key, resource in CLAIM_RESOURCES.items():
            name = claim.get(key)
            if name is None:
                continue
            problem = dns_subdomain_problem(name)
            if problem:
                return [f"{path}.{key}: {problem}"]
            claimed = claims.claimed(resource, namespace, name)
            if missing and claimed is Claimed.MISSING:
                reason = self._unenforced_claim_reason(claimed, resource, name)
                return [f"{path}.{key}: {reason}"]
            if claimed in (Claimed.OURS, Claimed.UNENFORCED):
                return [
                    f"{path}: already claims devices of class {self.profile.device_class}; "
                    "state GPU requests one way"
                ]
        return []


def _names_claims(obj: Mapping[str, Any]) -> bool:
    """Whether an object's spec lists pod claims (a Pod's; a workload's spec has none)."""
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and bool(spec.get("resourceClaims"))


def _claim_refs(pod: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(field path, API resource, name) of each claim and claim template a pod names."""
    spec = pod.get("spec")
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    refs = []
    for index, entry in enumerate(entries or ()):
        for key, resource in CLAIM_RESOURCES.items():
            name = entry.get(key) if isinstance(entry, Mapping) else None
            if isinstance(name, str):
                refs.append((f"spec.resourceClaims[{index}].{key}", resource, name))
    return refs


def _claim_problems(
    pod: Mapping[str, Any],
    namespace: object,
    claims: ClaimLookup,
    reason: Callable[[Claimed, str, str], str | None],
) -> list[FieldError]:
    """`reason(claimed, resource, name)` for each claim and template the pod names, as field
    errors; one error on the namespace instead when it cannot name claims to read."""
    problem = dns_label_problem(namespace) if namespace else "required"
    if problem or not isinstance(namespace, str):
        return [FieldError("metadata.namespace", f"{problem}, so its claims cannot be read")]
    found = []
    for path, resource, name in _claim_refs(pod):
        why = reason(claims.claimed(resource, namespace, name), resource, name)
        if why:
            found.append(FieldError(path, why))
    return found
