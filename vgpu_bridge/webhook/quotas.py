"""HAMi's and Volcano's namespace GPU quotas, kept after translation.

HAMi users cap a namespace with a ResourceQuota on `limits.nvidia.com/gpumem` (MiB per device,
summed over devices), `limits.nvidia.com/gpucores` (percent per device, summed) and the card count
(`limits.nvidia.com/gpu`, or Kubernetes' own `requests.nvidia.com/gpu`); Volcano's vGPU users on
`requests.volcano.sh/vgpu-number`, `vgpu-memory` and `vgpu-cores`, which Kubernetes counts as
extended resources. Both count the same claims, the same way (per device: Kubernetes would count
a multi-card container's `vgpu-memory` once, a claim books it on every card). A translated pod
names none of them, so neither HAMi nor Kubernetes counts it any more; this gate does, at admission:
the claims of our DeviceClass that exist in the namespace (allocated or not) plus what this pod's
claim templates would make must stay within each hard limit. A pod no webhook translated that asks
whole cards of our class as an extended resource (KEP-5004: our class's `extendedResourceName`,
or the implicit `deviceclass.resource.kubernetes.io/<class>`) counts them too, at admission; once
bound, kube-scheduler's claim for it is one of the namespace's claims (issue 35: such pods skipped
the gate, and a quota filled with shares took as many whole cards again); until then it counts for
every later admission as a pod waiting (`pending_pods.PendingWholeCards`: else many such pods
created at once each saw only the claims). `requests.` and `limits.` of one name are the same
limit (an extended resource's request always equals its limit). The quotas, the claims and the
unbound whole-card pods are read from watches (`QuotaCache`, `claim_bookings.ClaimBookings`,
`PendingWholeCards`): no list per admission.

Two admissions at once can both pass (each sees the other's claim missing), as can a pod admitted
before the claim controller has made the previous pod's claim, or before a watch has reported an
earlier pod or claim: see docs/webhook.md.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from vgpu_bridge.core.booking import (
    IMPLICIT_EXTENDED_RESOURCE_PREFIX,
    Asked,
    Booking,
    Sizing,
    claim_booking,
    claim_sizing,
    extended_resource_sizing,
    spec_booking,
    total,
)
from vgpu_bridge.core.dialects import volcano
from vgpu_bridge.core.dialects.resources import ResourceNames
from vgpu_bridge.core.inventory import Inventory
from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.core.quantity import MiB, QuantityError, parse_quantity
from vgpu_bridge.kube import Json, KubeApi, KubeError, api_path, dns_subdomain_problem
from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook.claim_bookings import (
    CLAIM_PAGE_SIZE,
    ClaimBookings,
    extended_claim_owner,
    where,
)
from vgpu_bridge.webhook.pending_pods import PendingWholeCards, uncounted
from vgpu_bridge.webhook.watching import follow

log = get_logger("vgpu_bridge.webhook.quotas")
ALL_QUOTAS = "/api/v1/resourcequotas"
RESOURCE_API = "/apis/resource.k8s.io/v1"
PREFIXES = ("limits.", "requests.")


@dataclass(frozen=True, slots=True)
class GpuQuota:
    """One hard limit of one ResourceQuota on what our claims book."""

    quota: str  # the ResourceQuota's name
    key: str  # as written in `spec.hard`, e.g. `limits.nvidia.com/gpumem`
    measure: str  # devices | memory | cores
    hard: int


def _measures(families: Iterable[ResourceNames]) -> dict[str, str]:
    """Resource name → what a quota on it counts. A percentage is no quota key in either
    vocabulary (HAMi does not count it; Volcano's node does not advertise it)."""
    measures = {}
    for names in families:
        measures.update({names.count: "devices", names.memory: "memory", names.cores: "cores"})
    return measures


def gpu_quotas(quota: Mapping[str, Any], names: ResourceNames) -> list[GpuQuota]:
    """The hard limits of `quota` that name a GPU share resource, HAMi's as `names` spells them or
    Volcano's; unreadable values are skipped (the API server validates quantities, so none are
    expected)."""
    measures = _measures((volcano.RESOURCES, names))
    hard = ((quota.get("spec") or {}).get("hard")) or {}
    name = str((quota.get("metadata") or {}).get("name"))
    found = []
    for key, value in sorted(hard.items()):
        prefix = next((p for p in PREFIXES if key.startswith(p)), None)
        measure = measures.get(key[len(prefix) :]) if prefix else None
        if measure is None:
            continue
        try:
            limit = int(parse_quantity(value))  # whole units, as Kubernetes shows them
        except QuantityError:
            continue
        found.append(GpuQuota(name, key, measure, limit))
    return found


class QuotaCache:
    """Namespace → its GPU quotas, from a watch on every ResourceQuota. `in_namespace` answers
    None while the watch is not current (until the watch after a list or a resume is
    established; see `watching`): the caller then asks the API server."""

    def __init__(self, api: KubeApi, *, names: ResourceNames) -> None:
        self._api, self._names = api, names
        self._by_namespace: dict[str, dict[str, list[GpuQuota]]] = {}
        self._lock = threading.Lock()
        self.synced = threading.Event()

    def run(self, stop: threading.Event) -> None:
        """Follow every ResourceQuota until `stop`; `synced` is set while the watch is current
        (see `watching`), not at the list: a quota changed between the list and the watch's
        answer would be unseen."""
        follow(self._api, ALL_QUOTAS, stop=stop, on_list=self._store, on_event=self.apply,
               on_current=self.synced.set, on_stale=self.synced.clear,
               what="resource quota")  # fmt: skip

    def in_namespace(self, namespace: str) -> list[GpuQuota] | None:
        if not self.synced.is_set():
            return None
        with self._lock:
            return [q for quotas in self._by_namespace.get(namespace, {}).values() for q in quotas]

    def replace(self, quotas: Iterable[Json]) -> None:
        """The quotas as a list known to be current says."""
        self._store(quotas)
        self.synced.set()

    def _store(self, quotas: Iterable[Json]) -> None:
        by_namespace: dict[str, dict[str, list[GpuQuota]]] = {}
        for quota in quotas:
            namespace, name = where(quota)
            limits = gpu_quotas(quota, self._names)
            if limits:
                by_namespace.setdefault(namespace, {})[name] = limits
        with self._lock:
            self._by_namespace = by_namespace

    def apply(self, kind: str, quota: Json) -> None:
        namespace, name = where(quota)
        limits = [] if kind == "DELETED" else gpu_quotas(quota, self._names)
        with self._lock:
            held = self._by_namespace.setdefault(namespace, {})
            if limits:
                held[name] = limits
            else:
                held.pop(name, None)
            if not held:
                del self._by_namespace[namespace]


class Uncountable(Exception):
    """A pod names a claim or template that does not exist: what it claims cannot be counted."""


@dataclass
class QuotaGate:
    """Why a pod would take its namespace past a GPU quota (empty: it would not)."""

    api: KubeApi
    cache: QuotaCache
    profile: DriverProfile
    names: ResourceNames
    inventory: Callable[[], Inventory]
    memory_factor: int = 1
    claims: ClaimBookings | None = None  # None: each admission lists the namespace's claims
    #: extended resources our DeviceClass serves (its `extendedResourceName`); the implicit
    #: `deviceclass.resource.kubernetes.io/<class>` is always counted
    extended_names: tuple[str, ...] = ()
    #: whole-card pods admitted but not bound yet (None: not counted, only each at its admission)
    pending: PendingWholeCards | None = None

    @cached_property
    def whole_card_names(self) -> tuple[str, ...]:
        implicit = IMPLICIT_EXTENDED_RESOURCE_PREFIX + self.profile.device_class
        return (implicit, *(n for n in self.extended_names if n != implicit))

    def asks_whole_cards(self, pod: Mapping[str, Any]) -> bool:
        """Whether kube-scheduler would give `pod` whole cards of our class for its extended
        resources (KEP-5004), which this gate then counts (`extended_resource_sizing`)."""
        return bool(extended_resource_sizing(pod, self.whole_card_names).requests)

    def reasons(
        self, namespace: str, pod: Mapping[str, Any], templates: Mapping[str, Json]
    ) -> list[str]:
        """`pod` as it will be created; `templates` the claim specs this admission makes, by
        template name (others are read from the API server). Whole cards it asks for as an
        extended resource count here, before they are bound; once bound, their claim counts
        through `used` (the pod itself never again)."""
        made_from, named = _claim_sources(pod)
        whole_cards = extended_resource_sizing(pod, self.whole_card_names)
        if not made_from and not named and not whole_cards.requests:
            return []  # the fast path of pods without GPUs stays free
        quotas = self._quotas(namespace)
        if not quotas:
            return []
        largest = max(self._card_sizes(), default=None)
        try:
            booked = total(self._template_booking(namespace, n, templates, largest)
                           for n in made_from)  # fmt: skip
            firsts = {n: b for n in named if (b := self._first_use(namespace, n, largest))}
        except Uncountable as exc:
            return [str(exc)]
        booked += total(firsts.values()) + whole_cards.booking(largest)
        if booked.devices == 0:
            return []
        used = self._used(namespace, largest, leaving_out=set(firsts))
        return [r for q in quotas if (r := self._exceeded(q, booked, used))]

    def _quotas(self, namespace: str) -> list[GpuQuota]:
        cached = self.cache.in_namespace(namespace)
        if cached is not None:
            return cached
        listed = self.api.list(api_path("/api/v1", "namespaces", namespace, "resourcequotas"))
        return [q for item in listed.get("items") or () for q in gpu_quotas(item, self.names)]

    def _card_sizes(self) -> tuple[int, ...]:
        return self.inventory().sizes(self.profile.driver)

    def _template_booking(
        self, namespace: str, name: str, made: Mapping[str, Json], largest: int | None
    ) -> Booking:
        spec = made.get(name)
        if spec is None:
            found = self._get(namespace, "resourceclaimtemplates", name)
            spec = (found.get("spec") or {}).get("spec") or {}
        booking = spec_booking(spec, profile=self.profile, largest_card=largest)
        return _countable(booking, f"resourceclaimtemplate {name}")

    def _first_use(self, namespace: str, name: str, largest: int | None) -> Booking | None:
        """What a claim written by hand (named by the pod) books, when this pod is its first
        user: it was made without our admission, so its first pod pays for it. A claim some pod
        already uses is in `used` and books nothing new."""
        claim = self._get(namespace, "resourceclaims", name)
        status = claim.get("status") or {}
        if status.get("reservedFor"):
            return None
        booking = claim_booking(claim, profile=self.profile, largest_card=largest)
        return _countable(booking, f"resourceclaim {name}")  # once allocated, its results count

    def _get(self, namespace: str, resource: str, name: str) -> Json:
        try:
            return self.api.get(api_path(RESOURCE_API, "namespaces", namespace, resource, name))
        except KubeError as exc:
            if exc.status == 404:
                raise Uncountable(
                    f"spec.resourceClaims: {resource[:-1]} {name} does not exist, so what the "
                    "pod claims cannot be counted against the namespace's GPU quota"
                ) from None
            raise

    def _used(self, namespace: str, largest: int | None, *, leaving_out: set[str]) -> Booking:
        """What the namespace's claims book, and the whole cards of its pods admitted but not
        bound yet (no claim of theirs exists: each is counted by its claim once it does)."""
        used, claimed_for = self._claims_used(namespace, largest, leaving_out=leaving_out)
        waiting = self._waiting_cards(namespace, claimed_for)
        return used + whole_card_sizing(waiting).booking(largest)

    def _claims_used(
        self, namespace: str, largest: int | None, *, leaving_out: set[str]
    ) -> tuple[Booking, set[str]]:
        """What the namespace's claims book, and the pods owning its extended-resource claims,
        from the watch, else from a list of them read in pages, each claim reduced to its sizing
        as it is read (a namespace of big claims never sits in memory whole)."""
        if self.claims is not None:
            cached = self.claims.used(namespace, largest, leaving_out=leaving_out)
            if cached is not None:
                return cached, self.claims.claimed_for(namespace)
        path = api_path(RESOURCE_API, "namespaces", namespace, "resourceclaims")
        listed = self.api.list_all(path, keep=self._sized, limit=CLAIM_PAGE_SIZE)
        used = total(item["sizing"].booking(largest) for item in listed.items
                     if item["name"] not in leaving_out)  # fmt: skip
        return used, {item["owner"] for item in listed.items if item["owner"] is not None}

    def _waiting_cards(self, namespace: str, claimed_for: set[str]) -> int:
        """Whole cards the namespace's unbound whole-card pods wait for, from the watch, else
        from a list of its unbound pods."""
        if self.pending is None:
            return 0
        waiting = self.pending.waiting(namespace)
        if waiting is None:
            waiting = self.pending.list_waiting(namespace)
        return uncounted(waiting, claimed_for)

    def _sized(self, claim: Json) -> Json:
        return {"name": where(claim)[1], "sizing": claim_sizing(claim, profile=self.profile),
                "owner": extended_claim_owner(claim)}  # fmt: skip

    def _exceeded(self, quota: GpuQuota, booked: Booking, used: Booking) -> str | None:
        if quota.measure == "memory" and booked.unsized + used.unsized:
            return (
                f"cannot count against quota {quota.quota}: {quota.key}: a whole card's memory "
                f"is unknown (no ResourceSlice of driver {self.profile.driver} is known)"
            )
        unit = self.memory_factor * MiB if quota.measure == "memory" else 1
        asked, held = _measure(booked, quota.measure), _measure(used, quota.measure)
        if asked + held <= quota.hard * unit:
            return None
        return (
            f"exceeded quota {quota.quota}: {quota.key}: requested {math.ceil(asked / unit)}, "
            f"used {math.ceil(held / unit)}, limited {quota.hard}"
        )


def whole_card_sizing(count: int) -> Sizing:
    """`count` whole cards of our class, as kube-scheduler's claim for them books (memory left to
    the card's default)."""
    return Sizing(((Asked(count, None, None),),) if count else ())


def _countable(booking: Booking, what: str) -> Booking:
    """`booking`, unless it asks for every device of our class (`allocationMode: All`): how many
    it takes is known only once allocated, and counting it as one device would let it escape
    the quota (issue 25); then `Uncountable`."""
    if booking.takes_all:
        raise Uncountable(
            f"spec.resourceClaims: {what}: {booking.takes_all[0]}: All takes every matching "
            "device, which cannot be counted against the namespace's GPU quota before "
            "allocation; ask for a count (allocationMode: ExactCount)"
        )
    return booking


def _measure(booking: Booking, measure: str) -> int:
    return {"devices": booking.devices, "memory": booking.memory_bytes, "cores": booking.cores}[
        measure
    ]


def _claim_sources(pod: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The claim templates the pod names (one claim is made per entry) and the claims it names.
    Names that are no DNS subdomain are left to the API server, which refuses the pod."""
    spec = pod.get("spec")
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    entries = [e for e in entries or () if isinstance(e, Mapping)]
    return _names(entries, "resourceClaimTemplateName"), _names(entries, "resourceClaimName")


def _names(entries: list[Mapping[str, Any]], key: str) -> list[str]:
    names = (e.get(key) for e in entries)
    return [n for n in names if isinstance(n, str) and not dns_subdomain_problem(n)]
