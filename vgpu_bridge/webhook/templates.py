"""ResourceClaimTemplate lifecycle: ensure before admitting, never overwrite, sweep the unused.

A template is shared by every pod of its shape in a namespace (its name is a hash of its spec).
Each admission that uses a template stamps `vgpu-bridge.io/last-admitted` on it at most every
`grace / 4`; the sweeper deletes only templates that no pod or workload references and whose
newest stamp is older than `grace`, with a resourceVersion precondition, so it never races a pod
that was just admitted.

What exists is learnt from a watch on our templates (`TemplateIndex`), never from memory of what
was once created: a template deleted behind our back (by hand, or with its namespace) is made
again by the next admission that needs it, and at once when a pod or workload still names it
(`on_deleted`, see restore.py).

Every template we make is owned by our MutatingWebhookConfiguration (ownership.py), so deleting it
deletes them; the sweeper's pass adopts the ones made before they were (the previous release's).
"""

from __future__ import annotations

import enum
import hashlib
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vgpu_bridge.core.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from vgpu_bridge.core.workloads import WORKLOAD_KINDS, pod_templates
from vgpu_bridge.kube import Json, KubeApi, KubeError, api_path
from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook.extra_workloads import ExtraResource, TooLarge, template_names_anywhere
from vgpu_bridge.webhook.ownership import NO_OWNER, Owner, OwnerUnavailable, adopted_references
from vgpu_bridge.webhook.watching import follow

log = get_logger("vgpu_bridge.webhook")

LAST_ADMITTED = "vgpu-bridge.io/last-admitted"
RESOURCE_API = "/apis/resource.k8s.io/v1"
ALL_TEMPLATES = api_path(RESOURCE_API, "resourceclaimtemplates")
OURS = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"


def templates_path(namespace: str, *name: str) -> str:
    """The API path of a namespace's ResourceClaimTemplates, or of the one `name`d."""
    return api_path(RESOURCE_API, "namespaces", namespace, "resourceclaimtemplates", *name)


# Where templates can be referenced from: every kind in core's table that holds pod templates.
REFERRERS = tuple(kind for kind in WORKLOAD_KINDS if kind.holds_pod_templates)
Clock = Callable[[], float]


class TemplateConflict(Exception):
    """A template of our name exists with another spec, or the API server altered ours."""


class TemplateLimit(TemplateConflict):
    """The namespace already holds `--max-templates-per-namespace` of our templates."""


class TemplateOwnerGone(TemplateConflict):
    """The configuration that would own a new template does not exist (an uninstall), or we may
    not read it."""


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str | None) -> float:
    """Epoch seconds of an RFC 3339 time in whole seconds; 0 for none, or for one we cannot read
    (a tenant may edit the stamp on a template in its namespace: that must not stop a sweep)."""
    try:
        return datetime.strptime(text or "", "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


def last_used(template: Json) -> float:
    """When the template was created or last stamped by an admission (epoch seconds)."""
    meta = template.get("metadata") or {}
    stamp = (meta.get("annotations") or {}).get(LAST_ADMITTED)
    return max(_parse_time(meta.get("creationTimestamp")), _parse_time(stamp))


def spec_digest(template: Json) -> str:
    spec = (template.get("spec") or {}).get("spec")
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Seen:
    """One of our templates as last seen: when it was last used, and a digest of its spec."""

    used: float
    spec: str

    @classmethod
    def of(cls, template: Json) -> Seen:
        return cls(last_used(template), spec_digest(template))


class Unknown(enum.Enum):
    """The index cannot tell (not listed yet, relisting, or full): ask the API server."""

    UNKNOWN = "unknown"


UNKNOWN = Unknown.UNKNOWN


class TemplateIndex:
    """Our templates that exist (namespace → name → Seen), from a watch on templates labelled as
    ours: a deletion by anyone (or of the whole namespace) is forgotten as soon as its event
    arrives. It answers UNKNOWN until it has listed, whenever its watch has stopped until it has
    listed again, and for names it has no room to hold (more than `max_entries`). Each deleted
    template, as its event last showed it, is handed to `on_deleted` (which must not block)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        max_entries: int = 100_000,
        on_deleted: Callable[[Json], None] = lambda _template: None,
    ) -> None:
        self._api, self._max_entries = api, max_entries
        self.on_deleted = on_deleted
        self._by_namespace: dict[str, dict[str, Seen]] = {}
        self._entries = 0
        self._full = False
        self._lock = threading.Lock()
        self.synced = threading.Event()

    def run(self, stop: threading.Event) -> None:
        follow(self._api, ALL_TEMPLATES, stop=stop, on_list=self.replace, on_event=self.apply,
               on_stale=self.synced.clear, what="template", labelSelector=OURS)  # fmt: skip

    def get(self, namespace: str, name: str) -> Seen | Unknown | None:
        with self._lock:
            seen = self._by_namespace.get(namespace, {}).get(name)
            if seen is None and (self._full or not self.synced.is_set()):
                return UNKNOWN
            return seen

    def count(self, namespace: str) -> int | None:
        """Our templates in `namespace`; None when the index cannot tell."""
        with self._lock:
            if self._full or not self.synced.is_set():
                return None
            return len(self._by_namespace.get(namespace, {}))

    def __len__(self) -> int:
        return self._entries

    def replace(self, templates: list[Json]) -> None:
        with self._lock:
            self._by_namespace, self._entries, self._full = {}, 0, False
            for template in templates:
                self._put(template["metadata"]["namespace"], template["metadata"]["name"],
                          Seen.of(template))  # fmt: skip
            self.synced.set()

    def apply(self, kind: str, template: Json) -> None:
        meta = template.get("metadata") or {}
        if kind == "DELETED":
            self.forget(meta.get("namespace", ""), meta.get("name", ""))
            self.on_deleted(template)
        else:
            self.remember(meta.get("namespace", ""), meta.get("name", ""), Seen.of(template))

    def remember(self, namespace: str, name: str, seen: Seen) -> None:
        with self._lock:
            self._put(namespace, name, seen)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            names = self._by_namespace.get(namespace, {})
            if names.pop(name, None) is not None:
                self._entries -= 1
            if not names:
                self._by_namespace.pop(namespace, None)

    def _put(self, namespace: str, name: str, seen: Seen) -> None:
        names = self._by_namespace.setdefault(namespace, {})
        if name not in names:
            if self._entries >= self._max_entries:
                self._full = True  # unheld names are UNKNOWN from now until the next list
                return
            self._entries += 1
        names[name] = seen


class TemplateStore:
    """Makes sure the templates a plan needs exist, with our spec, before a pod that uses them
    is admitted. Existence comes from the index (or, when it cannot tell, from the API server);
    a remembered template that was deleted is created again. New templates are refused once a
    namespace holds `max_per_namespace` of ours. Each new one is owned by `owner`."""

    def __init__(
        self,
        api: KubeApi,
        *,
        grace_s: float,
        index: TemplateIndex | None = None,
        max_per_namespace: int = 100,
        clock: Clock = time.time,
        owner: Owner = NO_OWNER,
    ) -> None:
        self._api = api
        self.owner = owner
        self._touch_every_s = grace_s / 4
        self._clock = clock
        self._max_per_namespace = max_per_namespace
        self.index = index if index is not None else TemplateIndex(api)  # an empty one is falsy

    def ensure(self, namespace: str, templates: Iterable[Json]) -> None:
        """Each template exists in `namespace` with exactly our spec, and is stamped as in use."""
        now = self._clock()
        for template in templates:
            name = template["metadata"]["name"]
            seen = self.index.get(namespace, name)
            if seen is UNKNOWN:
                seen = self._read(namespace, name)
            if seen is None:
                self._create(namespace, template, now)
            else:
                self._check_and_stamp(namespace, template, seen, now)

    def _read(self, namespace: str, name: str) -> Seen | None:
        try:
            return Seen.of(self._api.get(templates_path(namespace, name)))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def _create(self, namespace: str, template: Json, now: float) -> None:
        self._check_room(namespace)
        path = templates_path(namespace)
        name = template["metadata"]["name"]
        body = {**template, "metadata": {**template["metadata"], "namespace": namespace}}
        body["metadata"]["annotations"] = {LAST_ADMITTED: _stamp(now)}
        try:
            reference = self.owner.reference()
        except OwnerUnavailable as unavailable:
            raise TemplateOwnerGone(str(unavailable)) from None
        if reference is not None:
            body["metadata"]["ownerReferences"] = [reference]
        try:
            created = self._api.create(path, body)
        except KubeError as exc:
            existing = self._read(namespace, name) if exc.status == 409 else None
            if existing is None:  # not a conflict, or deleted again since
                raise
            self._check_and_stamp(namespace, template, existing, now)
            return
        if spec_digest(created) != spec_digest(template):
            self._api.delete(templates_path(namespace, name))
            raise TemplateConflict(
                f"the API server changed ResourceClaimTemplate {namespace}/{name} on create "
                "(dropped fields: is the DRAConsumableCapacity feature gate on?)"
            )
        self.index.remember(namespace, name, Seen(now, spec_digest(created)))

    def _check_room(self, namespace: str) -> None:
        count = self.index.count(namespace)
        if count is None:
            listed = self._api.list(templates_path(namespace), labelSelector=OURS,
                                    limit=self._max_per_namespace)  # fmt: skip
            count = len(listed.get("items") or [])
        if count >= self._max_per_namespace:
            raise TemplateLimit(
                f"namespace {namespace} already holds {count} ResourceClaimTemplates made by "
                f"vgpu-bridge, the most it makes per namespace (--max-templates-per-namespace): "
                "pods of the shapes it already has are still admitted; unused templates are "
                "deleted after --sweep-grace-seconds"
            )

    def _check_and_stamp(self, namespace: str, template: Json, seen: Seen, now: float) -> None:
        name = template["metadata"]["name"]
        if seen.spec != spec_digest(template):
            raise TemplateConflict(
                f"ResourceClaimTemplate {namespace}/{name} exists with a different spec; "
                "it was not made by this version of vgpu-bridge: delete it or rename ours"
            )
        if now - seen.used < self._touch_every_s:
            return
        path = templates_path(namespace, name)
        try:
            self._api.merge_patch(path, {"metadata": {"annotations": {LAST_ADMITTED: _stamp(now)}}})
        except KubeError as exc:
            if exc.status != 404:
                raise
            self.index.forget(namespace, name)  # deleted behind our back: make it again
            self._create(namespace, template, now)
            return
        self.index.remember(namespace, name, Seen(now, seen.spec))


class Sweeper:
    """Deletes our templates that nothing references any more, after a grace period; adopts
    (gives `owner`) those that have none, or an earlier configuration's."""

    def __init__(
        self,
        api: KubeApi,
        *,
        grace_s: float,
        clock: Clock = time.time,
        extra: Iterable[ExtraResource] = (),
        owner: Owner = NO_OWNER,
    ) -> None:
        self._api = api
        self._owner = owner
        self.max_adopted_per_pass = 1000  # the rest in the next passes: a sweep is never held up
        self._grace_s = grace_s
        self._clock = clock
        self._extra = tuple(extra)  # custom workload kinds that may name templates too
        self._forbidden_logged: set[ExtraResource] = set()
        self.left_behind = 0  # templates past the grace the last pass did not settle (metrics)

    def sweep_once(self) -> list[str]:
        """One pass; returns `namespace/name` of each template deleted. A pass that fails leaves
        in `left_behind` the templates past the grace it had not yet kept or deleted."""
        items = self._api.list_all(ALL_TEMPLATES, labelSelector=OURS).items
        self.adopt(items)
        now = self._clock()
        old = [t for t in items if now - last_used(t) > self._grace_s]
        deleted = []
        self.left_behind = len(old)
        for namespace in sorted({t["metadata"]["namespace"] for t in old}):
            in_use = self.referenced(namespace)
            for template in (t for t in old if t["metadata"]["namespace"] == namespace):
                unused = in_use is not None and template["metadata"]["name"] not in in_use
                if unused and self._delete(template):
                    deleted.append(f"{namespace}/{template['metadata']['name']}")
                self.left_behind -= 1
        return deleted

    def adopt(self, templates: list[Json]) -> list[str]:
        """Give our owner to each of `templates` without it (made by the previous release, or
        under a configuration since deleted and made again), with a resourceVersion
        precondition; returns `namespace/name` of each. Nothing while the owner is not there:
        the next pass tries again."""
        if not self._owner.name:
            return []
        try:
            reference = self._owner.confirm()
        except (OwnerUnavailable, KubeError) as unavailable:  # the sweep goes on regardless
            log.warning("claim templates not adopted", reason=str(unavailable))
            return []
        assert reference is not None  # a name: confirmed or gone
        adopted: list[str] = []
        orphans = ((t, refs) for t in templates
                   if (refs := adopted_references(t, reference)) is not None)  # fmt: skip
        for template, references in itertools.islice(orphans, self.max_adopted_per_pass):
            if self._set_owners(template, references):
                meta = template["metadata"]
                meta["ownerReferences"] = references
                adopted.append(f"{meta['namespace']}/{meta['name']}")
        if adopted:
            log.info("adopted claim templates", count=len(adopted), first=adopted[:10],
                     configuration=self._owner.name)  # fmt: skip
        return adopted

    def _set_owners(self, template: Json, references: list[Json]) -> bool:
        meta = template["metadata"]
        patch = {"metadata": {"ownerReferences": references,
                              "resourceVersion": meta["resourceVersion"]}}  # fmt: skip
        try:
            updated = self._api.merge_patch(templates_path(meta["namespace"], meta["name"]), patch)
        except KubeError as exc:
            if exc.status in (404, 409):  # gone, or changed since listed: the next pass
                return False
            raise
        meta["resourceVersion"] = (updated.get("metadata") or {}).get("resourceVersion", "")
        return True

    def _delete(self, template: Json) -> bool:
        meta = template["metadata"]
        path = templates_path(meta["namespace"], meta["name"])
        try:
            self._api.delete(path, preconditions={"resourceVersion": meta["resourceVersion"]})
        except KubeError as exc:
            if exc.status in (404, 409):  # gone already, or stamped since we listed it
                return False
            raise
        return True

    def referenced(self, namespace: str) -> set[str] | None:
        """Names of the templates that pods and workloads of `namespace` point at; None when
        some custom workloads could not be read (every template of `namespace` is then kept)."""
        names: set[str] = set()
        for kind in REFERRERS:
            path = api_path(kind.api_prefix, "namespaces", namespace, kind.resource)
            for obj in self._list_or_none(path):
                names |= _template_names({**obj, "apiVersion": kind.api_version, "kind": kind.kind})
        for extra in self._extra:
            try:
                names |= template_names_anywhere(self._list_or_none(extra.list_path(namespace)))
            except KubeError as exc:
                if exc.status != 403:
                    raise
                if extra not in self._forbidden_logged:  # once: RBAC will not change by itself
                    self._forbidden_logged.add(extra)
                    log.warning("extra workloads not allowed; their namespaces' templates kept",
                                resource=str(extra), namespace=namespace)  # fmt: skip
                return None
            except TooLarge as exc:
                log.warning("a workload too large to read; the namespace's templates kept",
                            resource=str(extra), namespace=namespace, reason=str(exc))  # fmt: skip
                return None
        return names

    def _list_or_none(self, path: str) -> list[Json]:
        try:
            items = self._api.list_all(path).items
        except KubeError as exc:
            if exc.status == 404:  # e.g. no Volcano in this cluster
                return []
            raise
        return items


def _template_names(obj: dict[str, Any]) -> set[str]:
    return {
        claim["resourceClaimTemplateName"]
        for template in pod_templates(obj)
        for claim in template.spec.get("resourceClaims") or ()
        if isinstance(claim, dict) and claim.get("resourceClaimTemplateName")
    }
