"""The kubelet stand-in: a test component doing the kubelet's part for pods on fake nodes.

For each pod bound to one of its nodes it waits until every ResourceClaim of the pod exists, is
allocated and reserved for the pod (the kubelet refuses to start a pod otherwise): those its
``spec.resourceClaims`` name, and the one kube-scheduler made for its extended resources backed by
a DeviceClass (KEP-5004; named in ``status.extendedResourceClaimStatus``), then hands the pod to
a ``NodePreparer`` (the kubelet's DRA manager calling the node agent's ``NodePrepareResources``),
then marks the pod Running. When a pod is being deleted it calls ``unprepare`` (on the preparer
that prepared it, even if another one is plugged in by then) and finishes the
deletion, as a kubelet confirms termination; a pod that vanished (force-deleted) is unprepared
too. A preparer that raises leaves the pod Pending (or,
in ``unprepare``, undeleted); the error is kept in ``failures`` by pod uid and the call retried.

The default preparer, ``MarkRunningOnly``, prepares nothing. The node-agent tests plug in a preparer
that dials the agent's gRPC socket.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from e2e.cluster.client import ApiError, Json, KubeClient


@dataclass(frozen=True)
class ClaimRef:
    """One ResourceClaim of a pod, as the kubelet passes it to ``NodePrepareResources``."""

    namespace: str
    name: str
    uid: str
    pod_claim_name: str  # "" for kube-scheduler's extended-resource claim: the pod names none
    claim: Json = field(compare=False, repr=False)


@dataclass(frozen=True)
class BoundPod:
    """A pod bound to a fake node, with its claims (all allocated and reserved for it)."""

    namespace: str
    name: str
    uid: str
    node_name: str
    claims: tuple[ClaimRef, ...]
    pod: Json = field(compare=False, repr=False)


class NodePreparer(Protocol):
    """The kubelet's DRA step for one pod; called from the stand-in's thread."""

    def prepare(self, pod: BoundPod) -> None:
        """Make the pod's claims usable on its node; raise to keep the pod Pending (retried)."""

    def unprepare(self, pod: BoundPod) -> None:
        """Release what ``prepare`` set up; called once the pod is being deleted."""


class MarkRunningOnly:
    """Prepares nothing: the pod is marked Running as soon as its claims are reserved for it."""

    def prepare(self, pod: BoundPod) -> None:
        return None

    def unprepare(self, pod: BoundPod) -> None:
        return None


class KubeletStandIn:
    """Polls pods on ``node_names`` and plays the kubelet for them until ``stop``."""

    def __init__(
        self,
        client: KubeClient,
        node_names: Iterable[str],
        *,
        preparer: NodePreparer | None = None,
        interval_s: float = 0.2,
    ) -> None:
        self._client = client
        self._nodes = frozenset(node_names)
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._preparer: NodePreparer = preparer or MarkRunningOnly()
        #: pod uid → the pod as prepared and the preparer that did it (which also unprepares it)
        self._prepared: dict[str, tuple[BoundPod, NodePreparer]] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet-standin", daemon=True)
        self.failures: dict[str, str] = {}
        self.errors: list[str] = []

    @property
    def preparer(self) -> NodePreparer:
        with self._lock:
            return self._preparer

    @preparer.setter
    def preparer(self, preparer: NodePreparer) -> None:
        with self._lock:
            self._preparer = preparer

    def start(self) -> KubeletStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=10)

    def __enter__(self) -> KubeletStandIn:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def sync_once(self) -> None:
        """One pass over all pods on our nodes (the loop calls this; tests may too)."""
        seen = set()
        for pod in self._client.items("/api/v1/pods"):
            if pod["spec"].get("nodeName") not in self._nodes:
                continue
            seen.add(pod["metadata"]["uid"])
            try:
                if pod["metadata"].get("deletionTimestamp"):
                    self._terminate(pod)
                elif pod.get("status", {}).get("phase", "Pending") == "Pending":
                    self._start(pod)
            except ApiError as error:  # e.g. its namespace is going away; the others go on
                self.errors.append(str(error))
        with self._lock:
            vanished = [entry for uid, entry in self._prepared.items() if uid not in seen]
        for bound, preparer in vanished:  # force-deleted: a kubelet still cleans up after them
            self._unprepare(bound, preparer)

    def _loop(self) -> None:
        while not self._stopping.wait(self._interval_s):
            try:
                self.sync_once()
            except Exception as error:  # the loop must outlive any one bad pass; kept for tests
                self.errors.append(f"{type(error).__name__}: {error}")

    def _start(self, pod: Json) -> None:
        bound = self._bound(pod)
        if bound is None:
            return
        preparer = self.preparer
        try:
            preparer.prepare(bound)
        except Exception as error:  # any preparer failure keeps the pod Pending (retried)
            self.failures[bound.uid] = f"{type(error).__name__}: {error}"
            return
        self.failures.pop(bound.uid, None)
        with self._lock:
            self._prepared[bound.uid] = (bound, preparer)
        path = f"/api/v1/namespaces/{bound.namespace}/pods/{bound.name}/status"
        self._client.patch(path, {"status": _running_status(pod)})

    def _terminate(self, pod: Json) -> None:
        meta = pod["metadata"]
        with self._lock:
            entry = self._prepared.get(meta["uid"])
        if entry is not None and not self._unprepare(*entry):
            return  # like a kubelet: the pod stays until unprepare succeeds
        self._client.delete(
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", grace_period_s=0
        )

    def _unprepare(self, bound: BoundPod, preparer: NodePreparer) -> bool:
        try:
            preparer.unprepare(bound)
        except Exception as error:  # recorded and retried on the next pass
            self.failures[bound.uid] = f"{type(error).__name__}: {error}"
            return False
        with self._lock:
            self._prepared.pop(bound.uid, None)
        self.failures.pop(bound.uid, None)
        return True

    def _bound(self, pod: Json) -> BoundPod | None:
        """The pod with its claims, or None while any claim is missing or not reserved for it."""
        meta = pod["metadata"]
        generated = {
            status["name"]: status.get("resourceClaimName")
            for status in pod.get("status", {}).get("resourceClaimStatuses") or []
        }
        claims: list[ClaimRef] = []
        for entry in pod["spec"].get("resourceClaims") or []:
            claim_name = entry.get("resourceClaimName") or generated.get(entry["name"])
            if claim_name is None:
                return None
            claim = self._reserved_claim(meta["namespace"], claim_name, meta["uid"])
            if claim is None:
                return None
            uid = claim["metadata"]["uid"]
            claims.append(ClaimRef(meta["namespace"], claim_name, uid, entry["name"], claim))
        extended = (pod.get("status", {}).get("extendedResourceClaimStatus") or {}).get(
            "resourceClaimName"
        )
        if extended:
            claim = self._reserved_claim(meta["namespace"], extended, meta["uid"])
            if claim is None:
                return None
            uid = claim["metadata"]["uid"]
            claims.append(ClaimRef(meta["namespace"], extended, uid, "", claim))
        namespace, node = meta["namespace"], pod["spec"]["nodeName"]
        return BoundPod(namespace, meta["name"], meta["uid"], node, tuple(claims), pod)

    def _reserved_claim(self, namespace: str, name: str, pod_uid: str) -> Json | None:
        path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
        try:
            claim = self._client.get(path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        status = claim.get("status") or {}
        reserved = {entry.get("uid") for entry in status.get("reservedFor") or []}
        if status.get("allocation") is None or pod_uid not in reserved:
            return None
        return claim


def _running_status(pod: Json) -> Json:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": now}
        for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    containers = [
        {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }
        for container in pod["spec"]["containers"]
    ]
    return {
        "phase": "Running",
        "startTime": now,
        "conditions": conditions,
        "containerStatuses": containers,
    }
