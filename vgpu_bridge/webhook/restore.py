"""Our templates deleted while something still needs them are made again at once.

A pod can be admitted pointing at a template that is deleted a moment later, or that was deleted
a moment before and whose deletion the template watch had not yet reported: the claim controller
then cannot make the pod's claim, and nothing else would ever make that template again. So every
deletion the watch reports is checked against the namespace: a template that a pod whose claim is
not made yet, or a workload (its future pods), still names is created again from the deleted
object, which holds everything it needs (the spec is deterministic and the name carries its hash).
The sweeper deletes only unreferenced templates, so it never fights this. Nor does it fight the
garbage collector: while the configuration that owns our templates is gone (an uninstall: it is
deleted first, and the collector then deletes every template), nothing is made again.

Deletions are queued by the watch thread and handled by a worker, which collects a burst for a
moment and then makes one API pass per namespace.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from vgpu_bridge.core.claims import template_name
from vgpu_bridge.core.workloads import pod_templates
from vgpu_bridge.kube import Json, KubeApi, KubeError, api_path
from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook.ownership import NO_OWNER, Owner, OwnerForbidden, OwnerGone
from vgpu_bridge.webhook.templates import REFERRERS, TemplateConflict

log = get_logger("vgpu_bridge.webhook.restore")
Ensure = Callable[[str, Iterable[Json]], None]


def restorable(deleted: Json) -> Json | None:
    """A fresh template made from a deleted one of ours; None unless its name carries the hash of
    its spec (as every name we make does), so an edited or hand-made one is never made again."""
    meta, spec = deleted.get("metadata") or {}, deleted.get("spec")
    name = meta.get("name")
    inner = spec.get("spec") if isinstance(spec, dict) else None
    if not isinstance(name, str) or not isinstance(inner, dict):
        return None
    if not name.endswith(template_name(inner, prefix="")):
        return None
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "labels": dict(meta.get("labels") or {})},
        "spec": spec,
    }


def still_needed(api: KubeApi, namespace: str) -> set[str]:
    """Templates of `namespace` that something will still make a claim from: pods (not ending)
    whose claim from it is not made yet, and workloads (not being deleted)."""
    names: set[str] = set()
    for kind in REFERRERS:
        path = api_path(kind.api_prefix, "namespaces", namespace, kind.resource)
        for obj in _items(api, path):
            if _ending(obj):
                continue
            typed = {**obj, "apiVersion": kind.api_version, "kind": kind.kind}
            names |= _unclaimed(typed) if kind.kind == "Pod" else _named(typed)
    return names


def _items(api: KubeApi, path: str) -> list[Json]:
    try:
        items = api.list_all(path).items
    except KubeError as exc:
        if exc.status == 404:  # e.g. no Volcano in this cluster
            return []
        raise
    return items


def _ending(obj: Json) -> bool:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    return bool(meta.get("deletionTimestamp")) or status.get("phase") in ("Succeeded", "Failed")


def _claims(obj: dict[str, Any]) -> list[Json]:
    return [
        claim
        for template in pod_templates(obj)
        for claim in template.spec.get("resourceClaims") or ()
        if isinstance(claim, dict) and isinstance(claim.get("resourceClaimTemplateName"), str)
    ]


def _named(obj: dict[str, Any]) -> set[str]:
    return {claim["resourceClaimTemplateName"] for claim in _claims(obj)}


def _unclaimed(pod: dict[str, Any]) -> set[str]:
    """Templates of a pod's claims that the claim controller has not made yet."""
    made = {s.get("name") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
    return {c["resourceClaimTemplateName"] for c in _claims(pod) if c.get("name") not in made}


class TemplateRestorer:
    """Takes deleted templates from the watch (`deleted`, never blocks) and makes again, on its
    own thread (`run`), those still needed, while `owner` exists."""

    def __init__(
        self,
        api: KubeApi,
        *,
        ensure: Ensure,
        max_pending: int = 10_000,
        linger_s: float = 0.5,
        owner: Owner = NO_OWNER,
    ) -> None:
        self._api, self._ensure, self._owner = api, ensure, owner
        self._pending: queue.Queue[Json] = queue.Queue(maxsize=max_pending)
        # Deletions come in bursts (the sweeper deletes a namespace's templates one after
        # another): after the first, more are collected for `linger_s`, so a burst costs a few
        # passes of LISTs per namespace rather than one per deletion or two.
        self._linger_s = linger_s

    def deleted(self, template: Json) -> None:
        try:
            self._pending.put_nowait(template)
        except queue.Full:  # a flood of deletions: the next admission of a shape still makes it
            log.warning("too many deleted templates queued; not checking this one",
                        template=(template.get("metadata") or {}).get("name"))  # fmt: skip

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                first = self._pending.get(timeout=0.5)
            except queue.Empty:
                continue
            batch, until = [first], time.monotonic() + self._linger_s
            while (left := until - time.monotonic()) > 0 and not stop.is_set():
                try:
                    batch.append(self._pending.get(timeout=left))
                except queue.Empty:
                    break
            while not self._pending.empty():
                batch.append(self._pending.get_nowait())
            self.restore(batch)

    def restore(self, deleted: list[Json]) -> list[str]:
        """Makes again those of `deleted` still needed; returns `namespace/name` of each."""
        by_namespace: dict[str, list[Json]] = {}
        for template in deleted:
            fresh = restorable(template)
            namespace = (template.get("metadata") or {}).get("namespace")
            if fresh is not None and isinstance(namespace, str) and namespace:
                by_namespace.setdefault(namespace, []).append(fresh)
        if not by_namespace or not self._owner_there():
            return []
        restored = []
        for namespace, templates in sorted(by_namespace.items()):
            restored += self._restore_in(namespace, templates)
        return restored

    def _owner_there(self) -> bool:
        """Whether our owner exists now (confirmed, so `ensure` writes its current uid)."""
        try:
            self._owner.confirm()
        except OwnerGone:
            log.info("deleted claim templates not restored: their owner is gone (uninstall)",
                     configuration=self._owner.name)  # fmt: skip
            return False
        except (KubeError, OwnerForbidden) as exc:
            log.warning("deleted claim templates not restored: owner unreadable",
                        configuration=self._owner.name, error=str(exc))  # fmt: skip
            return False
        return True

    def _restore_in(self, namespace: str, templates: list[Json]) -> list[str]:
        try:
            needed = still_needed(self._api, namespace)
            wanted = [t for t in templates if t["metadata"]["name"] in needed]
            if wanted:
                self._ensure(namespace, wanted)
        except (KubeError, TemplateConflict) as exc:  # e.g. the namespace is being deleted
            log.warning("deleted claim templates not restored", namespace=namespace,
                        error=str(exc))  # fmt: skip
            return []
        names = [f"{namespace}/{t['metadata']['name']}" for t in wanted]
        if names:
            log.info("restored deleted claim templates still in use", templates=names)
        return names
