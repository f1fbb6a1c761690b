"""What the webhook tells `kubectl describe` about one admission: the Events it makes, which
object each regards, and their notes. Pure: built from the request, its plan and the reasons of a
refusal; `events.EventRecorder` posts them.

Which object an Event regards (`kubectl describe` finds Events by kind, namespace, name and uid):
- A translated or warned object that has a name: the object itself. A CREATE is admitted before
  the object is stored, so it has no uid yet; the recorder reads it back from `lookup` once it
  exists. An UPDATE carries its uid.
- An object with only a `generateName` (a controller's pod): its controlling owner (the owner
  reference names its uid), with the pod named in the note; identical notes then aggregate into
  one Event of the owner, however many replicas there are. Without an owner: no Event.
- A refused object is never stored: its controlling owner when it has one, else the object by
  kind and name without a uid (`kubectl events --for pod/NAME`, `kubectl get events`). A refused
  object with neither a name nor an owner gets no Event: its creator got the denial itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from vgpu_bridge.core import DriverProfile, Plan
from vgpu_bridge.core.opaque_config import ShareConfigError, parse_share_config
from vgpu_bridge.core.quantity import QuantityError, parse_quantity
from vgpu_bridge.core.requests import containers
from vgpu_bridge.core.workloads import WORKLOAD_KINDS, api_group
from vgpu_bridge.kube import api_path, dns_label_problem, dns_subdomain_problem

TRANSLATED = "GpuShareTranslated"
REFUSED = "GpuShareRefused"
WARNED = "GpuShareWarning"
MAX_NOTE_CHARS = 1024  # the API server refuses a longer note
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event regards; `uid` is "" while it is not known (or never will be)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    def regarding(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace}
        return {**ref, "name": self.name, **({"uid": self.uid} if self.uid else {})}


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One Event to post. Occurrences with equal `key`s aggregate into one Event's series.
    `lookup`: the API path of the object's collection, listed by name once it is stored to learn
    its uid (the webhook may list these kinds already); `once` (its
    admission's uid) keeps it from aggregating with an earlier object of the same name."""

    regarding: ObjectRef
    type: str  # Normal | Warning
    reason: str
    action: str
    note: str
    lookup: str | None = None
    once: str = ""

    @property
    def key(self) -> tuple[str, ...]:
        ref = self.regarding
        return (ref.api_version, ref.kind, ref.namespace, ref.name, ref.uid,
                self.type, self.reason, self.action, self.note, self.once)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Admitted:
    """What one admission decided, as the Events need it."""

    uid: str
    object: Mapping[str, Any]
    namespace: str | None
    decision: str  # translated | unchanged | denied
    plan: Plan | None = None
    reasons: Sequence[str] = ()
    warnings: Sequence[str] = ()


def occurrences(admitted: Admitted, *, profile: DriverProfile) -> list[Occurrence]:
    """The Events one admission makes: what was translated, why it was refused, its warnings."""
    namespace = admitted.namespace
    if not isinstance(namespace, str) or dns_label_problem(namespace):
        return []  # never put into an API path
    meta = _map(admitted.object.get("metadata"))
    if admitted.decision == "denied":
        target = _refused_target(admitted.object, meta, namespace)
        return [_occurrence(target, admitted, "Warning", REFUSED, "Refuse",
                            "; ".join(admitted.reasons))] if target else []  # fmt: skip
    target = _admitted_target(admitted.object, meta, namespace)
    if target is None:
        return []
    found = []
    note = translated_note(admitted.plan, profile=profile) if admitted.plan else ""
    if admitted.decision == "translated" and note:  # a PodGroup's translation names no container
        found.append(_occurrence(target, admitted, "Normal", TRANSLATED, "Translate", note))
    if admitted.warnings:
        note = "; ".join(admitted.warnings)
        found.append(_occurrence(target, admitted, "Warning", WARNED, "Translate", note))
    return found


@dataclass(frozen=True, slots=True)
class _Target:
    ref: ObjectRef
    lookup: str | None
    about: str  # names the admitted object in the note when the Event regards another one


def _occurrence(
    target: _Target, admitted: Admitted, type_: str, reason: str, action: str, note: str
) -> Occurrence:
    kind = admitted.object.get("kind")
    named = note.startswith(f"{kind}/")  # a refusal's lines name the object already
    text = f"{target.about}: {note}" if target.about and not named else note
    if len(text) > MAX_NOTE_CHARS:
        text = text[: MAX_NOTE_CHARS - 1] + "…"
    once = admitted.uid if target.lookup else ""
    return Occurrence(target.ref, type_, reason, action, text, lookup=target.lookup, once=once)


def _admitted_target(obj: Mapping[str, Any], meta: Mapping[str, Any], ns: str) -> _Target | None:
    name, uid = meta.get("name"), meta.get("uid")
    ref = _self_ref(obj, name, ns)
    if ref is not None and isinstance(uid, str) and uid:
        return _Target(replace(ref, uid=uid), None, "")
    if ref is not None:
        lookup = _object_path(obj, ref)
        return _Target(ref, lookup, "") if lookup else None
    owner = _controller(meta, ns)
    return _Target(owner, None, _about(obj, meta)) if owner else None


def _refused_target(obj: Mapping[str, Any], meta: Mapping[str, Any], ns: str) -> _Target | None:
    owner = _controller(meta, ns)
    if owner is not None:
        return _Target(owner, None, _about(obj, meta))
    uid = meta.get("uid")  # an UPDATE refused: the object exists
    ref = _self_ref(obj, meta.get("name"), ns)
    if ref is not None and isinstance(uid, str) and uid:
        return _Target(replace(ref, uid=uid), None, "")
    return _Target(ref, None, "") if ref else None


def _self_ref(obj: Mapping[str, Any], name: object, namespace: str) -> ObjectRef | None:
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str) or not kind:
        return None
    if not isinstance(name, str) or dns_subdomain_problem(name):
        return None
    return ObjectRef(api_version, kind, namespace, name)


def _object_path(obj: Mapping[str, Any], ref: ObjectRef) -> str | None:
    """The collection the object will be stored in: only kinds of core's table have a known
    path."""
    group = api_group(obj)
    for kind in WORKLOAD_KINDS:
        if (kind.group, kind.kind, kind.api_version) == (group, ref.kind, ref.api_version):
            return api_path(kind.api_prefix, "namespaces", ref.namespace, kind.resource)
    return None


def _controller(meta: Mapping[str, Any], namespace: str) -> ObjectRef | None:
    """The owner reference marked `controller: true`, when it is complete."""
    for owner in _list(meta.get("ownerReferences")):
        owner = _map(owner)
        if owner.get("controller") is not True:
            continue
        fields = [owner.get(k) for k in ("apiVersion", "kind", "name", "uid")]
        if all(isinstance(f, str) and f for f in fields) and not dns_subdomain_problem(fields[2]):
            api_version, kind, name, uid = (str(f) for f in fields)
            return ObjectRef(api_version, kind, namespace, name, uid)
    return None


def _about(obj: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    name = meta.get("name") or f"{meta.get('generateName') or ''}*"
    return f"{obj.get('kind') or 'object'} {str(name)[:120]}"


def translated_note(plan: Plan, *, profile: DriverProfile) -> str:
    """What each container got: `container main: 1 card, 3000 MiB, 30% cores (template …)`."""
    specs = {t["metadata"]["name"]: _map(_map(t.get("spec")).get("spec")) for t in plan.templates}
    parts = []
    for pod in plan.translated:
        prefix = f"{pod.template.spec_path} " if len(plan.translated) > 1 else ""
        names = {c.path: str(c.body.get("name") or c.path) for c in containers(pod.template)}
        for container in pod.containers:
            share = claim_text(specs.get(container.template_name, {}), profile=profile)
            parts.append(f"{prefix}container {names.get(container.path, container.path)}: {share} "
                         f"(claim template {container.template_name})")  # fmt: skip
    return "; ".join(parts)


def claim_text(spec: Mapping[str, Any], *, profile: DriverProfile) -> str:
    """A claim spec's device requests in words; alternatives (`firstAvailable`) joined by "or".
    Under the nvidia profile, the enforcer's request is no card: it is said once, at the end,
    with the SM limit its config holds (`_enforcer_text`)."""
    texts, enforced, count = [], False, 0
    for request in _list(_map(spec.get("devices")).get("requests")):
        request = _map(request)
        exactly = _map(request.get("exactly"))
        if exactly and exactly.get("deviceClassName") == profile.enforcer_driver:
            enforced = True
            continue
        if exactly:
            texts.append(_device_text(exactly, profile))
            count += _count(exactly)
            continue
        options = [_map(s) for s in _list(request.get("firstAvailable"))]
        texts.append(" or ".join(_device_text(s, profile) for s in options))
        count += max((_count(s) for s in options), default=0)
    text = " + ".join(texts) or "no devices"
    if profile.enforcer_driver is None:
        return text
    return f"{text}, {_enforcer_text(spec, profile, enforced=enforced, cards=count)}"


def _count(body: Mapping[str, Any]) -> int:
    """The cards a request asks for; 2 (more than one) for `allocationMode: All`."""
    if body.get("allocationMode", "ExactCount") != "ExactCount":
        return 2
    count = body.get("count", 1)
    return count if isinstance(count, int) and not isinstance(count, bool) else 1


def _device_text(body: Mapping[str, Any], profile: DriverProfile) -> str:
    count = body.get("count", 1) if body.get("allocationMode", "ExactCount") == "ExactCount" else 0
    cards = f"{count} card{'s' if count != 1 else ''}" if count else "all cards"
    asked = _map(_map(body.get("capacity")).get("requests"))
    memory = _amount(asked.get(profile.memory_capacity))
    if memory is not None:
        memory_text = f"{_number(memory / MIB)} MiB"
    else:
        memory_text = "whole memory" if profile.memory_default_whole_card else "no memory"
    each = " each" if count != 1 else ""
    return f"{cards}, {memory_text}, {_cores_text(asked, profile)}{each}"


def _cores_text(asked: Mapping[str, Any], profile: DriverProfile) -> str:
    """The SMs a request books: a percent of ours, NVIDIA's shares as the percent of the card
    they are (left out: the request policy's default, one share), or none where the driver
    books no SMs (NVIDIA's memory and unlimited modes)."""
    if profile.cores_capacity is None:
        return "SMs not booked"
    cores = _amount(asked.get(profile.cores_capacity))
    shares = profile.shares_per_card
    if shares is None:
        return "100% cores" if cores is None else f"{_number(cores)}% cores"
    if cores is None:
        cores = Decimal(1)  # NVIDIA's request policy: a request without shares books one
    if cores < 0 or cores != cores.to_integral_value():
        return f"{_number(cores)} shares"  # the API server refuses it; never a made-up percent
    return f"{profile.cores_percent(int(cores))}% cores ({int(cores)} of {shares} shares)"


def _enforcer_text(
    spec: Mapping[str, Any], profile: DriverProfile, *, enforced: bool, cards: int
) -> str:
    """Who holds the container to its share, and the SM limit the enforcer's config asks for."""
    them = "them" if cards > 1 else "it"
    if not enforced:
        return f"NOT held to {them}: no request of {profile.enforcer_driver}"
    return f"held to {them} by {profile.enforcer_driver} ({_sm_limit_text(spec, profile)})"


def _sm_limit_text(spec: Mapping[str, Any], profile: DriverProfile) -> str:
    parameters = None
    for entry in _list(_map(spec.get("devices")).get("config")):
        opaque = _map(_map(entry).get("opaque"))
        if opaque.get("driver") == profile.enforcer_driver:
            parameters = opaque.get("parameters")
    try:
        cores = None if parameters is None else parse_share_config(parameters).cores
    except ShareConfigError:
        return "SM limit unreadable"
    if cores is None:
        return "no SM limit" if profile.shares_per_card is None else "SM limit: its shares"
    return f"SM limit {cores}%" if cores else "no SM limit"


def _number(amount: Decimal) -> str:
    return str(int(amount)) if amount == amount.to_integral_value() else f"{amount:.1f}"


def _amount(value: object) -> Decimal | None:
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
