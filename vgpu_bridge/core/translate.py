"""translate(obj) -> Plan: HAMi, Volcano and KAI GPU requests become DRA claim templates.

Pure: no I/O, no logging. Every problem of the object is collected and raised together as one
`InvalidRequest`; an object that asks for no GPU comes back with an empty plan.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from vgpu_bridge.core import annotations as notes
from vgpu_bridge.core.claim_groups import ClaimGroup, OwnShare, group_claims
from vgpu_bridge.core.claims import TEMPLATE_PREFIX, claim_spec, claim_template, template_name
from vgpu_bridge.core.context import TranslationContext
from vgpu_bridge.core.dialects import TRANSLATED_ANNOTATIONS, dialects_for
from vgpu_bridge.core.earlier import earlier_translation
from vgpu_bridge.core.errors import InvalidRequest
from vgpu_bridge.core.guardrails import check_pod
from vgpu_bridge.core.jsonpatch import PatchOp, apply_patch, escape
from vgpu_bridge.core.models import DeviceFilter, GpuRequest, Problems
from vgpu_bridge.core.names import CLAIM_PREFIX, OWN_CORES_ENV, OWN_MEMORY_ENV, TRANSLATED_LABEL
from vgpu_bridge.core.normalise import normalise
from vgpu_bridge.core.plan import Plan, TranslatedContainer, TranslatedPod
from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.core.requests import Share, shares
from vgpu_bridge.core.shapes import MAX_DEPTH, check_shape, deeper_than
from vgpu_bridge.core.workloads import PodTemplate, namespace_of, object_ref, pod_templates


@dataclass(frozen=True, slots=True)
class _Target:
    """Where and for which scheduler the claim templates of one object are made."""

    context: TranslationContext
    namespace: str | None
    template_prefix: str
    first_available: bool


@dataclass(slots=True)
class _Draft:
    """What the translation of one object has produced so far."""

    problems: Problems = field(default_factory=Problems)
    ops: list[PatchOp] = field(default_factory=list)
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    translated: list[TranslatedPod] = field(default_factory=list)


def translate(
    obj: Mapping[str, Any],
    *,
    context: TranslationContext,
    adapter: str = "default",
    template_prefix: str = TEMPLATE_PREFIX,
    first_available: bool = True,
) -> Plan:
    """The plan for `obj`; raises `InvalidRequest` naming every bad field.

    Template names are `template_prefix` + a hash of the spec; an adapter may scope them (Volcano
    puts the job's name in, so a job's templates are its own). `first_available=False` is for
    schedulers that cannot choose among alternatives (KAI).
    """
    check_shape(obj)
    ref = object_ref(obj)
    draft = _Draft()
    for key in ("apiVersion", "kind"):
        if not isinstance(obj.get(key), str) or not obj.get(key):
            draft.problems.add(key, "required")
    if not draft.problems:
        target = _Target(context, namespace_of(obj), template_prefix, first_available)
        templates = pod_templates(obj)
        draft.ops = earlier_translation(templates, dialects_for(context.config))
        if draft.ops:  # translated before, and asks for GPUs again: translated afresh
            templates = pod_templates(apply_patch(obj, draft.ops))
        for template in templates:
            _translate_template(template, target=target, draft=draft)
    if draft.ops and deeper_than(obj):  # the patched copy would be as deep as the object
        draft.problems.add("(root)", f"nests maps and lists deeper than {MAX_DEPTH} levels")
    if draft.problems:
        raise InvalidRequest(ref, draft.problems.errors)
    return Plan(
        object_ref=ref,
        adapter=adapter,
        patch=tuple(draft.ops),
        templates=tuple(draft.templates.values()),
        warnings=tuple(draft.warnings),
        translated=tuple(draft.translated),
    )


def _translate_template(template: PodTemplate, *, target: _Target, draft: _Draft) -> None:
    """Claims for the template's shares, the patch that adds them, and a record of both."""
    problems, config = draft.problems, target.context.config
    found = shares(template, problems, dialects_for(config))
    if not found:
        return
    check_pod(template, config=config, problems=problems)
    device_filter = _device_filter(template, target=target, draft=draft)
    mutex = notes.wants_mutex(template.annotations)
    requested = _normalised(found, mutex=mutex, target=target, draft=draft)
    translated: list[TranslatedContainer] = []
    for group in group_claims([(r, s.container.kind) for s, r in requested]):
        members = [requested[i] for i in group.members]
        translated += _claim_group(template, members, group, device_filter, target, draft)
    claims = {c.claim: c.template_name for c in translated}
    if not problems:
        listed = [{"name": c, "resourceClaimTemplateName": n} for c, n in claims.items()]
        draft.ops.extend(_pod_ops(template, listed))
        draft.ops.extend(_toleration_ops(template, {k for s in found for k in s.raw.resource_keys}))
        draft.translated.append(TranslatedPod(template, tuple(translated)))


def _claim_group(
    template: PodTemplate,
    members: list[tuple[Share, GpuRequest]],
    group: ClaimGroup,
    device_filter: DeviceFilter,
    target: _Target,
    draft: _Draft,
) -> list[TranslatedContainer]:
    """The group's claim, and for each member the patch that gives it the claim (and its own
    share, where below the claim's)."""
    group_shares = [share for share, _ in members]
    made = _group_claim(group_shares, group.request, device_filter, target=target, draft=draft)
    if made is None:
        return []
    claim, name = made
    taken = {
        c.get("name") for c in template.spec.get("resourceClaims") or () if isinstance(c, Mapping)
    }
    if claim in taken:
        draft.problems.add(
            f"{template.spec_path}.resourceClaims", f"already has a claim named {claim}"
        )
        return []
    draft.warnings.extend(_shared_claim_warnings(members, group, claim=claim))
    for share, own in zip(group_shares, group.own, strict=True):
        draft.ops.append(_container_op(share, claim))
        draft.ops.extend(_own_share_ops(share, own, count=group.request.count))
    return [TranslatedContainer(s.container.path, claim, name) for s in group_shares]


def _normalised(
    found: list[Share], *, mutex: bool, target: _Target, draft: _Draft
) -> list[tuple[Share, GpuRequest]]:
    """Each share with its request after defaults; under the `mutex` policy each card whole, and
    so is `gpucores: 100` where the driver has no core booking (`_exclusive_by_memory`)."""
    context, requested = target.context, []
    for share in found:
        request = normalise(
            share.raw, config=context.config, problems=draft.problems, warnings=draft.warnings
        )
        if request is None:
            continue
        if mutex:
            request = _whole_cards(request)
        elif _exclusive_by_memory(request, context.profile):
            draft.warnings.append(_whole_card_warning(share, context.profile))
            request = _whole_cards(request)
        elif _cores_not_booked(share, context.profile):
            draft.warnings.append(_cores_not_booked_warning(share, request, context.profile))
        if request.priority is not None and context.profile.config_api_version is None:
            draft.warnings.append(
                f"{share.raw.sources['priority']} is dropped: the {context.profile.name} "
                "profile's driver takes no priority"
            )
        requested.append((share, request))
    return requested


def _device_filter(template: PodTemplate, *, target: _Target, draft: _Draft) -> DeviceFilter:
    """The pod's device choice; its sharing mode and placement hints checked on the way."""
    annotations, meta_path, problems = template.annotations, template.metadata_path, draft.problems
    notes.check_mode(annotations, meta_path=meta_path, problems=problems, warnings=draft.warnings)
    draft.warnings.extend(notes.placement_warnings(annotations))
    device_filter = notes.read_filter(
        annotations, meta_path=meta_path, problems=problems, warnings=draft.warnings
    )
    notes.check_selector_lengths(
        device_filter, target.context.profile, annotations, meta_path=meta_path, problems=problems
    )
    return device_filter


def _group_claim(
    members: list[Share],
    request: GpuRequest,
    device_filter: DeviceFilter,
    *,
    target: _Target,
    draft: _Draft,
) -> tuple[str, str] | None:
    """The claim's name in the pod and its template (added to the draft); None after recording
    why there is none. A shared claim is named after its first app container, else its first."""
    context, first = target.context, members[0]
    spec = claim_spec(
        request,
        device_filter,
        profile=context.profile,
        inventory=context.inventory,
        percent_path=first.raw.sources.get("memory_percent", first.container.path),
        problems=draft.problems,
        first_available=target.first_available,
    )
    if spec is None:
        return None
    name = template_name(spec, prefix=target.template_prefix)
    draft.templates.setdefault(name, claim_template(spec, name=name, namespace=target.namespace))
    named = next((s for s in members if s.container.kind == "app"), first)
    return pod_claim_name(str(named.container.body.get("name", ""))), name


def _whole_cards(request: GpuRequest) -> GpuRequest:
    return replace(request, memory_mib=None, memory_percent=Decimal(100), cores=100)


def _exclusive_by_memory(request: GpuRequest, profile: DriverProfile) -> bool:
    """HAMi's `gpucores: 100` is a card of its own. A driver without a core booking (HAMi's) can
    only say so with the card's memory: booked whole, no share fits beside it (each books some
    memory) and it fits on no card in use."""
    return (
        not profile.books_cores
        and profile.enforcer_driver is None
        and request.cores == 100
        and not request.whole_card_memory
    )


def _cores_not_booked(share: Share, profile: DriverProfile) -> bool:
    """An SM share asked of NVIDIA's driver in a mode that books none: our enforcer holds the
    container to it, but the scheduler puts any share beside it."""
    asked = share.raw.cores
    return profile.enforcer_driver is not None and not profile.books_cores and bool(asked)


def _cores_not_booked_warning(share: Share, request: GpuRequest, profile: DriverProfile) -> str:
    """Which shares may still land beside it: any, unless it books each card's whole memory
    (then none fits beside it, and the card is its own whatever its SM limit)."""
    mode = "memory" if profile.memory_default_whole_card else "unlimited"
    if request.whole_card_memory:
        placed = "it books each card's whole memory, so no other share is placed beside it"
    else:
        placed = (
            "shares of any SM limit are placed beside it, and 100 does not keep the card to itself"
        )
    return (
        f"{share.raw.sources['cores']}: is the container's SM limit but not booked: NVIDIA's "
        f"driver with --consumable-shares={mode} counts no SMs, so {placed} (run NVIDIA's "
        "driver with --consumable-shares=100 to book SMs)"
    )


def _whole_card_warning(share: Share, profile: DriverProfile) -> str:
    asked = share.raw.sources.get("cores", share.container.path)
    return (
        f"{asked}: 100% of the SMs is a card of its own (HAMi's rule); the {profile.name} "
        "profile's driver has no core booking to keep other shares off it, so the whole card is "
        "booked, and that driver sets the container's memory limit to the whole card instead of "
        "the memory asked for"
    )


def pod_claim_name(container_name: str) -> str:
    """`gpu-<container>`, kept within the 63 characters of a DNS label."""
    name = CLAIM_PREFIX + container_name
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(container_name.encode()).hexdigest()[:8]
    return f"{CLAIM_PREFIX}{container_name[:50]}-{digest}"


def _container_op(share: Share, claim: str) -> PatchOp:
    """The container's resources without our extended resources, with the claim added."""
    resources = dict(share.container.body.get("resources") or {})
    for section in ("limits", "requests"):
        if isinstance(resources.get(section), Mapping):
            kept = {k: v for k, v in resources[section].items() if k not in share.raw.resource_keys}
            if kept:
                resources[section] = kept
            else:
                del resources[section]
    resources["claims"] = [*(resources.get("claims") or ()), {"name": claim}]
    return {"op": "add", "path": f"{share.container.pointer}/resources", "value": resources}


def _shared_claim_warnings(
    members: list[tuple[Share, GpuRequest]], group: ClaimGroup, *, claim: str
) -> list[str]:
    """What a shared claim cannot keep of each container's own limit."""
    apps = [s.container.path for s, _ in members if s.container.kind == "app"]
    warnings = []
    if len(apps) > 1:
        warnings.append(
            f"{', '.join(apps)} share claim {claim} with the init containers and run together: "
            "each may use up to their sum, held together, not its own share"
        )
    warnings += [
        f"{share.container.path} asks for no SM limit and shares claim {claim}: it gets the "
        f"claim's {group.request.cores}% (a container's own share can only lower the claim's)"
        for share, request in members
        if len(members) > 1 and request.cores == 0 and 0 < group.request.cores < 100
    ]
    return warnings


def _own_share_ops(share: Share, own: OwnShare | None, *, count: int) -> list[PatchOp]:
    """The container's own share on each of its cards, where it is below its shared claim's:
    env the claim's CDI edits leave alone, which libvgpu reads as a lower limit only."""
    if own is None:
        return []
    env = []
    for index in range(count):
        if own.memory_mib is not None:
            env.append({"name": f"{OWN_MEMORY_ENV}_{index}", "value": f"{own.memory_mib}m"})
        if own.cores is not None:
            env.append({"name": f"{OWN_CORES_ENV}_{index}", "value": str(own.cores)})
    pointer = f"{share.container.pointer}/env"
    if isinstance(share.container.body.get("env"), list):
        return [{"op": "add", "path": f"{pointer}/-", "value": e} for e in env]
    return [{"op": "add", "path": pointer, "value": env}]


def _toleration_ops(template: PodTemplate, removed: set[str]) -> list[PatchOp]:
    """For a workload's pod template, the tolerations the ExtendedResourceToleration admission
    plugin would give its pods for the extended resources translation removed (key: the resource
    name, operator Exists, effect NoSchedule): its pods no longer request them, so the plugin
    gives them none, and they would stay off GPU nodes tainted `nvidia.com/gpu:NoSchedule`. A Pod
    has them already (the plugin runs before webhooks), where the cluster runs the plugin."""
    if template.spec_pointer == "/spec":
        return []
    listed = template.spec.get("tolerations")
    present = listed if isinstance(listed, list) else []
    wanted = [
        toleration
        for key in sorted(removed)
        if (toleration := {"key": key, "operator": "Exists", "effect": "NoSchedule"}) not in present
    ]
    pointer = f"{template.spec_pointer}/tolerations"
    if not wanted:
        return []
    if isinstance(listed, list):
        return [{"op": "add", "path": f"{pointer}/-", "value": t} for t in wanted]
    return [{"op": "add", "path": pointer, "value": wanted}]


def _pod_ops(template: PodTemplate, claims: list[dict[str, str]]) -> list[PatchOp]:
    """Add the pod's claims, drop the annotations we translated, mark the pod as translated."""
    spec, metadata = template.spec, template.metadata
    ops: list[PatchOp] = []
    claims_pointer = f"{template.spec_pointer}/resourceClaims"
    if isinstance(spec.get("resourceClaims"), list):
        ops += [{"op": "add", "path": f"{claims_pointer}/-", "value": c} for c in claims]
    else:
        ops.append({"op": "add", "path": claims_pointer, "value": claims})
    meta_pointer = template.metadata_pointer
    translated = sorted(TRANSLATED_ANNOTATIONS & set(template.annotations))
    if translated and len(translated) == len(template.annotations):
        ops.append({"op": "remove", "path": f"{meta_pointer}/annotations"})
    else:
        ops += [
            {"op": "remove", "path": f"{meta_pointer}/annotations/{escape(key)}"}
            for key in translated
        ]
    label = {TRANSLATED_LABEL: "true"}
    if metadata is None:
        ops.append({"op": "add", "path": meta_pointer, "value": {"labels": label}})
    elif not isinstance(metadata.get("labels"), Mapping):
        ops.append({"op": "add", "path": f"{meta_pointer}/labels", "value": label})
    else:
        path = f"{meta_pointer}/labels/{escape(TRANSLATED_LABEL)}"
        ops.append({"op": "add", "path": path, "value": "true"})
    return ops
