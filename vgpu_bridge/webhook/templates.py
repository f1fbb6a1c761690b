"""ResourceClaimTemplate lifecycle: ensure before admitting, never overwrite, sweep the unused.

A template is shared by every pod of its shape in a namespace (its name is a hash of its spec).
Each admission that uses a template stamps `vgpu-bridge.io/last-admitted` on it at most every
`grace / 4`; the sweeper deletes only templates that no pod or workload references and whose
newest stamp is older than `grace`, with a resourceVersion precondition, so it never races a pod
that was just admitted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from vgpu_bridge.core.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from vgpu_bridge.core.workloads import pod_templates
from vgpu_bridge.kube import Json, KubeApi, KubeError

LAST_ADMITTED = "vgpu-bridge.io/last-admitted"
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates"
ALL_TEMPLATES = "/apis/resource.k8s.io/v1/resourceclaimtemplates"
# Where templates can be referenced from: (list path, apiVersion, kind).
REFERRERS = (
    ("/api/v1/namespaces/{namespace}/pods", "v1", "Pod"),
    ("/api/v1/namespaces/{namespace}/replicationcontrollers", "v1", "ReplicationController"),
    ("/apis/apps/v1/namespaces/{namespace}/deployments", "apps/v1", "Deployment"),
    ("/apis/apps/v1/namespaces/{namespace}/replicasets", "apps/v1", "ReplicaSet"),
    ("/apis/apps/v1/namespaces/{namespace}/statefulsets", "apps/v1", "StatefulSet"),
    ("/apis/apps/v1/namespaces/{namespace}/daemonsets", "apps/v1", "DaemonSet"),
    ("/apis/batch/v1/namespaces/{namespace}/jobs", "batch/v1", "Job"),
    ("/apis/batch/v1/namespaces/{namespace}/cronjobs", "batch/v1", "CronJob"),
    (
        "/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs",
        "batch.volcano.sh/v1alpha1",
        "Job",
    ),
)
Clock = Callable[[], float]


class TemplateConflict(Exception):
    """A template of our name exists with another spec, or the API server altered ours."""


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


class TemplateStore:
    def __init__(self, api: KubeApi, *, grace_s: float, clock: Clock = time.time) -> None:
        self._api = api
        self._touch_every_s = grace_s / 4
        self._clock = clock
        self._touched: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def ensure(self, namespace: str, templates: Iterable[Json]) -> None:
        """Each template exists in `namespace` with exactly our spec, and is stamped as in use."""
        now = self._clock()
        for template in templates:
            key = (namespace, template["metadata"]["name"])
            with self._lock:
                fresh = now - self._touched.get(key, -1e18) < self._touch_every_s
            if not fresh:
                self._ensure_one(namespace, template, now)
                with self._lock:
                    self._touched[key] = now

    def _ensure_one(self, namespace: str, template: Json, now: float) -> None:
        path = TEMPLATES.format(namespace=namespace)
        name = template["metadata"]["name"]
        stamp = {LAST_ADMITTED: _stamp(now)}
        body = {**template, "metadata": {**template["metadata"], "namespace": namespace}}
        body["metadata"]["annotations"] = stamp
        try:
            created = self._api.create(path, body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            existing = self._api.get(f"{path}/{name}")
            if existing.get("spec", {}).get("spec") != template["spec"]["spec"]:
                raise TemplateConflict(
                    f"ResourceClaimTemplate {namespace}/{name} exists with a different spec; "
                    "it was not made by this version of vgpu-bridge: delete it or rename ours"
                ) from None
            self._api.merge_patch(f"{path}/{name}", {"metadata": {"annotations": stamp}})
            return
        if created.get("spec", {}).get("spec") != template["spec"]["spec"]:
            self._api.delete(f"{path}/{name}")
            raise TemplateConflict(
                f"the API server changed ResourceClaimTemplate {namespace}/{name} on create "
                "(dropped fields: is the DRAConsumableCapacity feature gate on?)"
            )


class Sweeper:
    """Deletes our templates that nothing references any more, after a grace period."""

    def __init__(self, api: KubeApi, *, grace_s: float, clock: Clock = time.time) -> None:
        self._api = api
        self._grace_s = grace_s
        self._clock = clock

    def sweep_once(self) -> list[str]:
        """One pass; returns `namespace/name` of each template deleted."""
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
        items = self._api.list(ALL_TEMPLATES, labelSelector=selector).get("items", [])
        now = self._clock()
        old = [t for t in items if now - self._last_used(t) > self._grace_s]
        deleted = []
        for namespace in sorted({t["metadata"]["namespace"] for t in old}):
            in_use = self.referenced(namespace)
            for template in (t for t in old if t["metadata"]["namespace"] == namespace):
                if template["metadata"]["name"] not in in_use and self._delete(template):
                    deleted.append(f"{namespace}/{template['metadata']['name']}")
        return deleted

    @staticmethod
    def _last_used(template: Json) -> float:
        meta = template["metadata"]
        stamp = (meta.get("annotations") or {}).get(LAST_ADMITTED)
        return max(_parse_time(meta.get("creationTimestamp")), _parse_time(stamp))

    def _delete(self, template: Json) -> bool:
        meta = template["metadata"]
        path = f"{TEMPLATES.format(namespace=meta['namespace'])}/{meta['name']}"
        try:
            self._api.delete(path, preconditions={"resourceVersion": meta["resourceVersion"]})
        except KubeError as exc:
            if exc.status in (404, 409):  # gone already, or stamped since we listed it
                return False
            raise
        return True

    def referenced(self, namespace: str) -> set[str]:
        """Names of the templates that pods and workloads of `namespace` point at."""
        names: set[str] = set()
        for path, api_version, kind in REFERRERS:
            for obj in self._list_or_none(path.format(namespace=namespace)):
                names |= _template_names({**obj, "apiVersion": api_version, "kind": kind})
        return names

    def _list_or_none(self, path: str) -> list[Json]:
        try:
            items: list[Json] = self._api.list(path).get("items", [])
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
