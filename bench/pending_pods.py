"""What the watch of unbound pods costs a webhook replica (issue 35, item 4): memory and CPU.

The quota gate counts whole-card pods admitted but not yet bound (`webhook/pending_pods.py`): the
webhook follows every pod of the cluster with `spec.nodeName=` and holds, per whole-card pod, its
uid and card count. Pods are many, so:

Memory: the real `vgpu-bridge webhook` process, its first list of unbound pods served by the abuse
tier's API stand-in (`tests/abuse/fake_api.py`), with no pod, with PODS plain pending pods (a
Deployment's, with managedFields, as the API server stores them) and with PODS pending whole-card
pods in one namespace. Peak RSS (VmHWM), RSS and CPU time a few seconds after the pod watch has
listed (its watch request seen).

CPU: one pending pod's watch event as the API server streams it, in this process, per event:
a plain pod screened by its bytes (`PendingWholeCards.screen`), the same decoded and applied
(what it would cost unscreened), and a whole-card pod decoded and applied. Run with
`python bench/pending_pods.py` (`--pods 20000` for a bigger first list).

Measured on the 2-core dev machine (busy): with 2,000 pending pods, plain or whole-card, peak and
settled RSS 54 MB as with none (held: 112 bytes per whole-card pod, at most 4,096 per namespace
and 65,536 in all); the first list's CPU within the rows' noise at 2,000 (0.48-0.59 s for the
whole start) and +0.9 s at 20,000; per event 3.2 us screened (a plain pod) against 23 us decoded,
30 us for a whole-card pod held.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.abuse import fake_api as stand_in
from tests.abuse.fake_api import FakeApi, fake_api
from tests.abuse.processes import proc_status, wait_until
from tests.abuse.webhook_client import running_webhook
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.webhook.pending_pods import PendingWholeCards

PODS = 2_000
SETTLE_S = 5.0
WHOLE_CARD_NAMES = ("nvidia.com/gpu", f"deviceclass.resource.kubernetes.io/{DEFAULT.device_class}")
Json = dict[str, Any]


def pending_pod(gpus: int = 0) -> Json:
    """A Deployment's pod waiting for kube-scheduler, as the API server stores it (~4 KB); with
    `gpus`, opted out and asking that many whole cards as `nvidia.com/gpu`."""
    fields: Json = {
        "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}}},
        "f:spec": {"f:containers": {'k:{"name":"app"}': {".": {}, "f:image": {}}}},
    }
    managed = [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "time": "2026-12-07T05:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields},
               {"manager": "kube-scheduler", "operation": "Update", "apiVersion": "v1",
                "time": "2026-12-07T05:00:01Z", "fieldsType": "FieldsV1", "subresource": "status",
                "fieldsV1": {"f:status": {"f:conditions": {}}}}]  # fmt: skip
    resources: Json = {"requests": {"cpu": "500m", "memory": "512Mi"},
                       "limits": {"cpu": "1", "memory": "1Gi"}}  # fmt: skip
    labels = {"app": "web", "pod-template-hash": "7f9c6d5b8"}
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
        labels["vgpu-bridge.io/ignore"] = "true"
    container = {"name": "app", "image": "registry.example.com/team/web:1.2.3",
                 "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                 "env": [{"name": f"SETTING_{i}", "value": "x" * 24} for i in range(8)],
                 "resources": resources,
                 "volumeMounts": [{"name": "kube-api-access-x2k4q", "readOnly": True,
                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                 "terminationMessagePath": "/dev/termination-log",
                 "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}  # fmt: skip
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "web-7f9c6d5b8-NNNN", "generateName": "web-7f9c6d5b8-",
                     "namespace": "tenant", "uid": "5d3c0e2a-9a59-4b6e-8f43-2f1d6a0cNNNN",
                     "resourceVersion": "81234567", "creationTimestamp": "2026-12-07T05:00:00Z",
                     "labels": labels,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": "web-7f9c6d5b8",
                                          "uid": "0c1b7e5d-3c0e-2a9a-594b-6e8f432f1d6a",
                                          "controller": True, "blockOwnerDeletion": True}],
                     "managedFields": managed},
        "spec": {"containers": [container], "restartPolicy": "Always",
                 "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                 "serviceAccountName": "default", "schedulerName": "default-scheduler",
                 "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                  "effect": "NoExecute", "tolerationSeconds": 300}],
                 "volumes": [{"name": "kube-api-access-x2k4q", "projected": {"sources": [
                     {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
                 "priority": 0, "enableServiceLinks": True,
                 "preemptionPolicy": "PreemptLowerPriority"},
        "status": {"phase": "Pending", "qosClass": "Burstable",
                   "conditions": [{"type": "PodScheduled", "status": "False",
                                   "lastTransitionTime": "2026-12-07T05:00:01Z",
                                   "reason": "Unschedulable",
                                   "message": "0/120 nodes are available: 120 Insufficient cpu."}]},
    }  # fmt: skip


def served(shape: Json, count: int) -> Callable[[str | None], Iterator[bytes]]:
    """`count` copies of `shape` in namespace `tenant`, each made as it is sent."""
    template = json.dumps(shape).encode()

    def pods(namespace: str | None) -> Iterator[bytes]:
        if namespace in (None, "tenant"):
            yield from (template.replace(b"NNNN", b"%05d" % i) for i in range(count))

    return pods


def pods_by_selector() -> None:
    """The stand-in serves its pods only to a list of unbound pods (`fieldSelector`): the
    webhook's other pod list, HAMi's scheduler pods by label (webhook/legacy.py), finds none,
    as the API server's label selector would; the stand-in itself ignores selectors, and the
    2,000 pods read whole there would be counted as this watch's cost."""
    streamed = stand_in._Handler._stream_list

    def _stream_list(handler: Any, path: str, query: dict[str, str]) -> None:
        if path.endswith("/pods") and "fieldSelector" not in query:
            handler._answer(200, {"items": [], "metadata": {"resourceVersion": "1"}})
        else:
            streamed(handler, path, query)

    stand_in._Handler._stream_list = _stream_list  # type: ignore[method-assign,assignment]


def cpu_s(pid: int) -> float:
    """User and system CPU time of process `pid`, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def watching_pods(api: FakeApi) -> bool:
    with api.lock:
        return any(p.startswith("/api/v1/pods?") and "watch=true" in p for _, p in api.requests)


def replica(shape: Json | None, count: int) -> tuple[float, float, float]:
    """(peak RSS MB, RSS MB, CPU s), `SETTLE_S` after the pod watch has listed (the start's other
    work done by then in every row alike)."""
    with tempfile.TemporaryDirectory() as directory, fake_api() as api:
        if shape is not None:
            api.served["pods"] = served(shape, count)
        with running_webhook(Path(directory), api) as webhook:
            wait_until(lambda: watching_pods(api), webhook.process, webhook.log_file,
                       "the unbound pods' watch after its first list")  # fmt: skip
            time.sleep(SETTLE_S)
            pid = webhook.process.pid
            return proc_status(pid, "VmHWM") / 1024, proc_status(pid, "VmRSS") / 1024, cpu_s(pid)


def held_bytes_per_pod(count: int) -> float:
    """What the watch holds per whole-card pod (traced allocations; each pod's event decoded and
    applied, then dropped)."""
    pending = PendingWholeCards(None, names=WHOLE_CARD_NAMES,  # type: ignore[arg-type]  # no calls
                                held_per_namespace=count, held_in_all=count)  # fmt: skip
    pending.replace([])
    line = json.dumps(pending_pod(gpus=2)).encode()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(count):
        pending.apply("ADDED", json.loads(line.replace(b"NNNN", b"%05d" % i)))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(pending) == count
    return held / count


def event_line(pod: Json) -> bytes:
    return json.dumps({"type": "ADDED", "object": pod}, separators=(",", ":")).encode()


def per_event_us(work: Callable[[], object], repeats: int) -> float:
    start = time.process_time()
    for _ in range(repeats):
        work()
    return (time.process_time() - start) / repeats * 1e6


def event_cpu(repeats: int) -> list[tuple[str, int, float]]:
    """(what, event bytes, µs per event)."""
    pending = PendingWholeCards(None, names=WHOLE_CARD_NAMES)  # type: ignore[arg-type]  # no calls
    pending.replace([])
    plain, whole = event_line(pending_pod()), event_line(pending_pod(gpus=2))
    assert pending.screen(plain) is not None, "the plain pod's event was not screened"
    assert pending.screen(whole) is None, "the whole-card pod's event was screened"

    def applied(line: bytes) -> Callable[[], None]:
        def work() -> None:
            event = json.loads(line)
            pending.apply(event["type"], event["object"])

        return work

    return [
        ("plain pod, screened by its bytes", len(plain),
         per_event_us(lambda: pending.screen(plain), repeats)),
        ("plain pod, decoded and applied (unscreened)", len(plain),
         per_event_us(applied(plain), repeats)),
        ("whole-card pod, decoded and held", len(whole), per_event_us(applied(whole), repeats)),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20_000, help="pod events timed")
    parser.add_argument("--pods", type=int, default=PODS, help="pending pods served")
    args = parser.parse_args()
    pods_by_selector()
    print(f"A replica once its watch of unbound pods has listed ({args.pods} in one namespace)")
    print(f"{'pending pods':<44}{'peak MB':>10}{'RSS MB':>10}{'CPU s':>8}")
    shapes = {"none": None, "plain (a Deployment's, ~4 KB each)": pending_pod(),
              "whole-card (nvidia.com/gpu: 2, opted out)": pending_pod(gpus=2)}  # fmt: skip
    for label, shape in shapes.items():
        peak, rss, cpu = replica(copy.deepcopy(shape), args.pods)
        print(f"{label:<44}{peak:>10.0f}{rss:>10.0f}{cpu:>8.2f}")
    print(f"held per whole-card pod: {held_bytes_per_pod(args.pods):.0f} bytes")
    print()
    print("One pending pod's watch event, our CPU per event")
    for what, size, us in event_cpu(args.repeats):
        print(f"{what:<46}{size:>6} B{us:>10.1f} us")


if __name__ == "__main__":
    main()
