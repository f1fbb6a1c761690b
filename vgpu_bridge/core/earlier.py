"""What an earlier translation added to a pod template that asks for GPUs again.

`kubectl apply` (client-side), `helm upgrade` and Argo CD merge the manifest from Git into the
live object: the claims the webhook added stay, and the GPU limits it removed come back. Such a
template is translated afresh once these entries are taken out, so a re-applied workload gets the
same claims again (an unchanged object when nothing else changed) instead of a second claim of the
same name. Pure: only patch operations are computed.

An entry is ours when its template is labelled translated and it has the names the translator
gives: a pod claim `gpu-<container>` made from a template `vgpu-<hash>`, the containers' references
to such a claim, and the own-share variables of those containers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from vgpu_bridge.core.claims import TEMPLATE_PREFIX
from vgpu_bridge.core.dialects import Dialect
from vgpu_bridge.core.jsonpatch import PatchOp
from vgpu_bridge.core.models import Problems
from vgpu_bridge.core.names import CLAIM_PREFIX, OWN_CORES_ENV, OWN_MEMORY_ENV, TRANSLATED_LABEL
from vgpu_bridge.core.requests import containers, shares
from vgpu_bridge.core.workloads import PodTemplate

#: the variables `translate._own_share_ops` adds (libvgpu reads them as a lower limit)
OWN_SHARE_ENV = re.compile(f"({OWN_MEMORY_ENV}|{OWN_CORES_ENV})_[0-9]+")


def earlier_translation(
    templates: Sequence[PodTemplate], dialects: tuple[Dialect, ...]
) -> list[PatchOp]:
    """Operations removing an earlier translation's entries from each of `templates` that is
    labelled translated and asks for GPUs again; [] when there is none."""
    ops: list[PatchOp] = []
    for template in templates:
        labels = (template.metadata or {}).get("labels")
        if not isinstance(labels, Mapping) or labels.get(TRANSLATED_LABEL) != "true":
            continue
        if shares(template, Problems(), dialects):  # its problems are found again afterwards
            ops += _template_ops(template)
    return ops


def _is_ours(claim: object) -> bool:
    if not isinstance(claim, Mapping):
        return False
    name, made_from = claim.get("name"), claim.get("resourceClaimTemplateName")
    return (
        isinstance(name, str)
        and name.startswith(CLAIM_PREFIX)
        and isinstance(made_from, str)
        and made_from.startswith(TEMPLATE_PREFIX)
    )


def _template_ops(template: PodTemplate) -> list[PatchOp]:
    listed = template.spec.get("resourceClaims")
    if not isinstance(listed, list):
        return []
    ours = [i for i, claim in enumerate(listed) if _is_ours(claim)]
    names = {listed[i]["name"] for i in ours}
    ops = _removals(f"{template.spec_pointer}/resourceClaims", ours, len(listed))
    for container in containers(template):
        resources = container.body.get("resources")
        refs = resources.get("claims") if isinstance(resources, Mapping) else None
        if not isinstance(refs, list):
            continue
        taken = [i for i, ref in enumerate(refs) if _names(ref, names)]
        if not taken:
            continue
        ops += _removals(f"{container.pointer}/resources/claims", taken, len(refs))
        env = container.body.get("env")
        if isinstance(env, list):
            own = [i for i, entry in enumerate(env) if _own_share_variable(entry)]
            ops += _removals(f"{container.pointer}/env", own, len(env))
    return ops


def _names(ref: object, names: set[str]) -> bool:
    return isinstance(ref, Mapping) and ref.get("name") in names


def _own_share_variable(entry: object) -> bool:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return isinstance(name, str) and OWN_SHARE_ENV.fullmatch(name) is not None


def _removals(pointer: str, indices: list[int], length: int) -> list[PatchOp]:
    """Remove `indices` of the list at `pointer`: the whole list when they are all of it, else
    one by one from the last, so each index still points where it did."""
    if not indices:
        return []
    if len(indices) == length:
        return [{"op": "remove", "path": pointer}]
    return [{"op": "remove", "path": f"{pointer}/{i}"} for i in sorted(indices, reverse=True)]
