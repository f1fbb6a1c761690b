"""What ResourceClaims cost a webhook replica (issue 35, item 2): memory, and CPU per foreign event.

Memory: the real `vgpu-bridge webhook` process, its claim watch's first list served by the abuse
tier's API stand-in (`tests/abuse/fake_api.py`, items streamed as they are made), with 300 claims
in one namespace, first small ones (one request asking memory), then big ones (1.26 MiB each: 32
requests of our class with no memory request, each with 4 CEL selectors of 10 KiB; within the
API's limits). Its peak RSS (VmHWM) once the watch has listed (GET /bookings answers), and its
RSS a few seconds later. Goal: the big claims' rows <= 1.5x the small ones'. Before the fix the
replica kept each big claim's `spec.devices` and decoded pages of 500 whole: peak 1,212 MB, 454 MB
held (tests/abuse/test_webhook_big_claims.py on the code before it, same machine).

CPU: the claim watch sees every ResourceClaim of the cluster (the API server filters them by name
and namespace only). One foreign claim's event (NVIDIA's driver, allocated, with its managedFields,
as the API server streams it) decoded and booked as before, next to screened by its bytes
(`ClaimBookings.screen`), in this process, per event (CPU time). Run with `make bench`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.abuse.fake_api import fake_api
from tests.abuse.processes import proc_status, wait_until
from tests.abuse.webhook_client import running_webhook
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.webhook.claim_bookings import ClaimBookings

CLAIMS = 300
SETTLE_S = 5.0
GOAL_RATIO = 1.5
Json = dict[str, Any]


def big_claim() -> Json:
    """1.26 MiB: 32 requests of our class, no memory request, 4 CEL selectors of 10 KiB each."""
    expression = f'device.attributes["{DEFAULT.driver}"].productName.contains("{"x" * 10240}")'
    exactly = {"deviceClassName": DEFAULT.device_class, "count": 1,
               "selectors": [{"cel": {"expression": expression}}] * 4}  # fmt: skip
    return {"spec": {"devices": {"requests": [{"name": f"r{i}", "exactly": exactly}
                                              for i in range(32)]}}}  # fmt: skip


def small_claim() -> Json:
    """One request of our class asking 1 GiB and 10 % of the SMs."""
    exactly = {"deviceClassName": DEFAULT.device_class, "count": 1,
               "capacity": {"requests": {"memory": "1Gi", "cores": "10"}}}  # fmt: skip
    return {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def served(shape: Json) -> Callable[[str | None], Iterator[bytes]]:
    """CLAIMS copies of `shape` in namespace `tenant`, each made as it is sent."""
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "c-NNNN", "namespace": "tenant", "resourceVersion": "1"},
             **shape}  # fmt: skip
    template = json.dumps(claim).encode()

    def claims(namespace: str | None) -> Iterator[bytes]:
        if namespace in (None, "tenant"):
            yield from (template.replace(b"NNNN", b"%04d" % i) for i in range(CLAIMS))

    return claims


def replica_rss_mb(shape: Json) -> tuple[float, float, float]:
    """(claim size MiB, peak RSS MB once listed, RSS MB `SETTLE_S` later)."""
    size = len(json.dumps(shape)) / 2**20
    with tempfile.TemporaryDirectory() as directory, fake_api() as api:
        api.served["resourceclaims"] = served(shape)
        with running_webhook(Path(directory), api) as webhook:
            wait_until(lambda: webhook.get("/bookings")[0] == 200, webhook.process,
                       webhook.log_file, "the claim watch's first list")  # fmt: skip
            peak = proc_status(webhook.process.pid, "VmHWM") / 1024
            time.sleep(SETTLE_S)
            settled = proc_status(webhook.process.pid, "VmRSS") / 1024
    return size, peak, settled


def foreign_event() -> bytes:
    """An allocated claim of NVIDIA's driver as the API server streams its MODIFIED event."""
    fields: Json = {"f:status": {"f:allocation": {".": {}, "f:devices": {}}}}
    managed: list[Json] = [
        {"manager": m, "operation": "Update", "apiVersion": "resource.k8s.io/v1",
         "time": "2026-12-07T05:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}
        for m in ("kube-scheduler", "kube-controller-manager", "kubelet")
    ]  # fmt: skip
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-0017", "device": "gpu-3"}
    claim = {
        "kind": "ResourceClaim", "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": "trainer-7f9c-gpu-x2k4q", "generateName": "trainer-7f9c-gpu-",
                     "namespace": "ml-team", "uid": "5d3c0e2a-9a59-4b6e-8f43-2f1d6a0c1b7e",
                     "resourceVersion": "81234567", "creationTimestamp": "2026-12-07T05:00:00Z",
                     "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "trainer-7f9c",
                                          "uid": "0c1b7e5d-3c0e-2a9a-594b-6e8f432f1d6a",
                                          "controller": True, "blockOwnerDeletion": True}],
                     "finalizers": ["resource.kubernetes.io/delete-protection"],
                     "managedFields": managed},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]}},
        "status": {"allocation": {"devices": {"results": [result]}, "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                    "values": ["node-0017"]}]}]}},
                   "reservedFor": [{"resource": "pods", "name": "trainer-7f9c",
                                    "uid": "0c1b7e5d-3c0e-2a9a-594b-6e8f432f1d6a"}]},
    }  # fmt: skip
    event = {"type": "MODIFIED", "object": claim}
    return json.dumps(event, separators=(",", ":")).encode()


def per_event_us(work: Callable[[], object], repeats: int) -> float:
    start = time.process_time()
    for _ in range(repeats):
        work()
    return (time.process_time() - start) / repeats * 1e6


def foreign_cpu(repeats: int) -> tuple[int, float, float]:
    """(event bytes, µs decoded and booked as before, µs screened)."""
    bookings = ClaimBookings(None, profile=DEFAULT)  # type: ignore[arg-type]  # never calls it
    bookings.replace([])
    line = foreign_event()
    assert bookings.screen(line) is not None, "the event was not screened"

    def decoded() -> None:
        event = json.loads(line)
        bookings.apply(event["type"], event["object"])

    return len(line), per_event_us(decoded, repeats), per_event_us(lambda: bookings.screen(line),
                                                                    repeats)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20_000, help="foreign events timed")
    args = parser.parse_args()
    print(f"A replica's RSS with {CLAIMS} claims in one namespace at its first list")
    print(f"{'claims':<44}{'claim MiB':>10}{'peak MB':>10}{'settled MB':>12}")
    rows = {}
    shapes = {"small (one request, memory asked)": small_claim(),
              "big (32 requests x 4 CEL selectors of 10 KiB)": big_claim()}  # fmt: skip
    for label, shape in shapes.items():
        rows[label] = replica_rss_mb(shape)
        size, peak, settled = rows[label]
        print(f"{label:<44}{size:>10.3f}{peak:>10.0f}{settled:>12.0f}")
    (_, small_peak, small_settled), (_, big_peak, big_settled) = rows.values()
    peak_ratio, settled_ratio = big_peak / small_peak, big_settled / small_settled
    verdict = "met" if max(peak_ratio, settled_ratio) <= GOAL_RATIO else "NOT met"
    print(f"big / small: peak {peak_ratio:.2f}x, settled {settled_ratio:.2f}x "
          f"(goal <= {GOAL_RATIO}x: {verdict})")  # fmt: skip
    print()
    size, before, after = foreign_cpu(args.repeats)
    print(f"One foreign claim's watch event ({size} bytes), our CPU per event")
    print(f"{'decoded and booked (before)':<44}{before:>10.1f} us")
    print(f"{'screened by its bytes (after)':<44}{after:>10.1f} us")
    print(f"{'ratio':<44}{before / after:>10.0f}x")


if __name__ == "__main__":
    main()
