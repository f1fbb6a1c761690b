"""Quick reviews: what needs no translation and no API call (a pod without GPUs, an object we
skip, a malformed review) is answered by `quick_review_body` with exactly the answer the full
path gives; anything else gives up (None) and goes to a worker. Against a recording API server,
which must see no request from a quick answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.tls import write_self_signed
from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over
from vgpu_bridge.core import DEFAULT, Inventory
from vgpu_bridge.core.dialects import hami
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.connections import Request
from vgpu_bridge.webhook.fastpath import QUICK_MAX_CONTAINERS
from vgpu_bridge.webhook.quotas import QuotaCache, QuotaGate
from vgpu_bridge.webhook.server import QUICK_REVIEW_BYTES, AdmissionRoutes, TLSFiles
from vgpu_bridge.webhook.wire import Head

PLAIN = {"cpu": "1", "memory": "1Gi"}
GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}
CLAIMED = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "vgpu-web-1a2b"}]}


def privileged(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return obj


def pod(limits: dict[str, Any], *, labels: Any = None, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "x", "resources": {"limits": limits}}
    meta = {"name": "p", "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [container], **spec}}  # fmt: skip


def review(
    obj: Any, *, kind: str = "Pod", dry_run: bool = False, operation: str = "CREATE"
) -> bytes:
    request = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": kind},
               "operation": operation, "namespace": "team-a", "object": obj,
               "dryRun": dry_run}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


def with_quotas(recorded: RecordingApi) -> Admitter:
    cache = QuotaCache(recorded.api, names=hami.RESOURCES)
    gate = QuotaGate(api=recorded.api, cache=cache, profile=DEFAULT, names=hami.RESOURCES,
                     inventory=Inventory, memory_factor=1)  # fmt: skip
    return admitter_over(recorded, quotas=gate)


ANSWERED_QUICKLY = {
    "a pod without GPUs": review(pod(PLAIN)),
    "a pod with as many containers as the selector thread looks at": review(
        pod(PLAIN, containers=[{"name": f"c{i}"} for i in range(QUICK_MAX_CONTAINERS)])
    ),
    "an update of a workload being deleted": review(
        {"metadata": {"name": "d", "deletionTimestamp": "2026-12-03T10:00:00Z"}, "spec": {}},
        kind="Deployment",
        operation="UPDATE",
    ),
    "a pod whose limits are no map": review(pod(PLAIN, containers=5)),
    "no AdmissionReview": b'{"kind": "Pod"}',
    "no JSON": b"\xff\xfe",
    "a pod naming claims, quotas not enforced": review(pod(PLAIN, **CLAIMED)),
    "an opted-out pod naming claims, nothing a guardrail refuses": review(
        pod(PLAIN, labels={"vgpu-bridge.io/ignore": "true"}, **CLAIMED)
    ),
}


@pytest.mark.parametrize("body", ANSWERED_QUICKLY.values(), ids=ANSWERED_QUICKLY.keys())
def test_what_needs_no_translation_is_answered_quickly_as_the_full_path_answers(
    recorded: RecordingApi, body: bytes
) -> None:
    quick = admitter_over(recorded).quick_review_body(body)
    assert quick is not None
    assert quick == admitter_over(recorded).review_body(body)
    assert recorded.calls == []


GIVES_UP = {
    "a pod asking for a GPU": review(pod(GPU)),
    "a Deployment": review({"metadata": {"name": "d"}, "spec": {}}, kind="Deployment"),
    "a pod that opted out, naming GPUs (read once, by a worker)": review(
        pod(GPU, labels={"vgpu-bridge.io/ignore": "true"})
    ),
    "a privileged pod naming claims (a claim of our class brings the guardrails)": review(
        privileged(pod(PLAIN, labels={"vgpu-bridge.io/ignore": "true"}, **CLAIMED))
    ),
    "a pod bound by nodeName naming claims": review(pod(PLAIN, nodeName="node-1", **CLAIMED)),
    "a pod with more containers than the selector thread looks at (issue 25)": review(
        pod(PLAIN, containers=[{"name": f"c{i}"} for i in range(QUICK_MAX_CONTAINERS + 1)])
    ),
    "a workload template with more containers than the selector thread looks at": review(
        {
            "metadata": {"name": "d"},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [{"name": f"c{i}"} for i in range(QUICK_MAX_CONTAINERS + 1)]
                    }
                }
            },
        },
        kind="Deployment",
        operation="UPDATE",
    ),
    "a pod asking for a GPU by annotation": review(
        {**pod(PLAIN), "metadata": {"name": "p", "annotations": {"nvidia.com/use-gputype": "A100"}}}
    ),
}


@pytest.mark.parametrize("body", GIVES_UP.values(), ids=GIVES_UP.keys())
def test_what_core_must_translate_goes_to_a_worker(recorded: RecordingApi, body: bytes) -> None:
    assert admitter_over(recorded).quick_review_body(body) is None
    assert recorded.calls == []


def test_a_gpu_key_hidden_from_the_byte_look_is_still_seen_once_parsed(
    recorded: RecordingApi,
) -> None:
    """The look at the raw bytes is only a shortcut: a key written with JSON escapes reaches the
    parsed check, which sends the pod to a worker all the same."""
    body = review(pod(PLAIN)).replace(b'"cpu"', b'"nvidia\\u002ecom/gpu"')
    assert b"nvidia.com/" not in body
    assert json.loads(body)["request"]["object"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"
    ]
    assert admitter_over(recorded).quick_review_body(body) is None


def test_a_pod_naming_claims_goes_to_a_worker_while_quotas_are_enforced(
    recorded: RecordingApi,
) -> None:
    """Counting its share against the namespace's quotas may read the API server."""
    admitter = with_quotas(recorded)
    assert admitter.quick_review_body(review(pod(PLAIN, **CLAIMED))) is None
    assert admitter.quick_review_body(review(pod(PLAIN))) is not None
    assert admitter.quick_review_body(review(pod(PLAIN, **CLAIMED), dry_run=True)) is not None
    assert recorded.calls == []


def test_a_quick_answer_is_counted_like_any_other(recorded: RecordingApi) -> None:
    admitter = admitter_over(recorded)
    admitter.quick_review_body(review(pod(PLAIN)))
    admitter.quick_review_body(b"not json")
    value = admitter.metrics.registry.get_sample_value
    assert value("vgpu_bridge_admissions_total", {"decision": "unchanged"}) == 1
    assert value("vgpu_bridge_admissions_total", {"decision": "bad-request"}) == 1
    assert value("vgpu_bridge_admission_duration_seconds_count") == 1


def routes(recorded: RecordingApi, tmp_path: Path, *, client_ca: bool) -> AdmissionRoutes:
    cert, key = write_self_signed(tmp_path)
    tls = TLSFiles(str(cert), str(key), client_ca_file=str(cert) if client_ca else None)
    return AdmissionRoutes(admitter_over(recorded), lambda: True, tls=tls)


def mutate(body: bytes, *, verified: bool = False) -> Request:
    return Request(Head("POST", "/mutate", "HTTP/1.1"), body, "127.0.0.1:1", verified)


def test_the_route_answers_a_small_plain_review_quickly(
    recorded: RecordingApi, tmp_path: Path
) -> None:
    reply = routes(recorded, tmp_path, client_ca=False).quick(mutate(review(pod(PLAIN))))
    assert reply is not None
    assert reply.status == 200
    assert json.loads(reply.body)["response"]["allowed"] is True


def test_a_review_past_the_quick_size_goes_to_a_worker(
    recorded: RecordingApi, tmp_path: Path
) -> None:
    big = pod(PLAIN, **{"nodeSelector": {"padding": "x" * QUICK_REVIEW_BYTES}})
    assert routes(recorded, tmp_path, client_ca=False).quick(mutate(review(big))) is None


def test_a_review_of_40_kib_goes_to_a_worker(recorded: RecordingApi, tmp_path: Path) -> None:
    """Issue 25: the quick size was 64 KiB, where one review took 9.4 ms of the selector."""
    big = pod(PLAIN, **{"nodeSelector": {"padding": "x" * 40 * 1024}})
    assert routes(recorded, tmp_path, client_ca=False).quick(mutate(review(big))) is None


def test_without_the_required_client_certificate_nothing_is_answered_quickly(
    recorded: RecordingApi, tmp_path: Path
) -> None:
    """The worker's route refuses it (403), as before."""
    guarded = routes(recorded, tmp_path, client_ca=True)
    assert guarded.quick(mutate(review(pod(PLAIN)))) is None
    assert guarded.handle(mutate(review(pod(PLAIN)))).status == 403
    assert guarded.quick(mutate(review(pod(PLAIN)), verified=True)) is not None


def sizing_counted(admitter: Admitter) -> list[object]:
    """The pods whose whole cards `admitter`'s quota gate sizes, in order (a list it fills)."""
    assert admitter.quotas is not None
    sized: list[object] = []
    asks = admitter.quotas.asks_whole_cards

    def counted(pod: Any) -> bool:
        sized.append(pod)
        return asks(pod)

    admitter.quotas.asks_whole_cards = counted  # type: ignore[method-assign]
    return sized


def test_a_pod_without_gpus_is_answered_without_sizing_whole_cards(
    recorded: RecordingApi,
) -> None:
    """Issue 35's A/B: the quick answer to a pod without GPUs sized its extended resources as
    whole cards twice, while none of its resource names is one of our class. A name of ours, even
    written with JSON escapes, is still sized (and takes the pod to a worker)."""
    admitter = with_quotas(recorded)
    sized = sizing_counted(admitter)
    assert admitter.quick_review_body(review(pod(PLAIN))) is not None
    assert sized == []
    implicit = f"deviceclass.resource.kubernetes.io/{DEFAULT.device_class}"
    escaped = review(pod(PLAIN)).replace(
        b'"cpu"', b'"' + implicit.replace("/", "\\/").encode() + b'"'
    )
    assert implicit.encode() not in escaped
    assert admitter.quick_review_body(escaped) is None
    assert len(sized) == 1
    assert recorded.calls == []
