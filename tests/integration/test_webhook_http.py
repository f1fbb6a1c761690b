"""The webhook over real TLS on loopback: admissions, denials, bad input, health, TLS rotation."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.webhook_harness import INVENTORY, RunningWebhook, running_webhook
from tests.tls import write_self_signed
from vgpu_bridge.core import TranslationContext, translate
from vgpu_bridge.core.jsonpatch import apply_patch
from vgpu_bridge.webhook import server


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningWebhook]:
    with running_webhook(tmp_path_factory.mktemp("tls"), max_body_bytes=64 * 1024) as running:
        yield running


def gpu_pod(limits: dict[str, Any] | None = None) -> dict[str, Any]:
    limits = limits or {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}
    container = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [container]},
    }


def request(obj: dict[str, Any], **fields: Any) -> dict[str, Any]:
    base = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": obj.get("kind", "Pod")},
        "operation": "CREATE",
        "namespace": "team-a",
        "object": obj,
        "dryRun": True,
    }
    return {**base, **fields}


def patched(response: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    ops = json.loads(base64.b64decode(response["patch"]))
    assert response["patchType"] == "JSONPatch"
    result: dict[str, Any] = apply_patch(obj, ops)
    return result


def test_dry_run_create_of_a_gpu_pod_comes_back_translated(webhook: RunningWebhook) -> None:
    pod = gpu_pod()
    response = webhook.review(request(pod))
    assert response["uid"] == "u-1"
    assert response["allowed"] is True
    expected_plan = translate(
        {**pod, "metadata": {**pod["metadata"], "namespace": "team-a"}},
        context=TranslationContext(inventory=INVENTORY),
    )
    assert patched(response, pod) == expected_plan.apply_to(pod)


def test_percentage_uses_the_inventory(webhook: RunningWebhook) -> None:
    pod = gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50})
    response = webhook.review(request(pod))
    claims = patched(response, pod)["spec"]["resourceClaims"]
    assert claims[0]["resourceClaimTemplateName"].startswith("vgpu-")


def test_pod_without_gpu_request_is_allowed_untouched(webhook: RunningWebhook) -> None:
    pod = gpu_pod({"cpu": "1"})
    response = webhook.review(request(pod, dryRun=False))
    assert response == {"uid": "u-1", "allowed": True}


def test_invalid_quantity_is_denied_with_its_field_path(webhook: RunningWebhook) -> None:
    response = webhook.review(request(gpu_pod({"nvidia.com/gpumem": "lots"})))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert "spec.containers[0].resources.limits[nvidia.com/gpumem]" in response["status"]["message"]


def test_placement_hints_come_back_as_warnings(webhook: RunningWebhook) -> None:
    pod = gpu_pod()
    pod["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "binpack"}
    response = webhook.review(request(pod))
    assert response["allowed"] is True
    assert any("scheduler's job" in w for w in response["warnings"])


@pytest.mark.parametrize(
    ("fields", "labels"),
    [
        pytest.param({"namespace": "kube-system", "dryRun": False}, {}, id="excluded-namespace"),
        pytest.param({"namespace": "vgpu-bridge", "dryRun": False}, {}, id="own-namespace"),
        pytest.param({"dryRun": False}, {"vgpu-bridge.io/ignore": "true"}, id="opt-out-label"),
        pytest.param({"operation": "UPDATE", "dryRun": False}, {}, id="pod-update"),
        pytest.param({"operation": "DELETE", "dryRun": False}, {}, id="delete"),
    ],
)
def test_what_is_not_ours_to_mutate_is_allowed_untouched(
    webhook: RunningWebhook, fields: dict[str, Any], labels: dict[str, str]
) -> None:
    pod = gpu_pod()
    pod["metadata"]["labels"] = labels
    assert webhook.review(request(pod, **fields)) == {"uid": "u-1", "allowed": True}


def test_api_failure_while_ensuring_templates_is_an_internal_error(webhook: RunningWebhook) -> None:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
    status, data = webhook.post(
        json.dumps({**body, "request": request(gpu_pod(), dryRun=False)}).encode()
    )
    assert (status, data) == (500, b"internal error")
    assert webhook.review(request(gpu_pod()))["allowed"] is True  # and it keeps serving


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", b"not JSON"),
        (b"[]", b"not an AdmissionReview"),
        (
            json.dumps(
                {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1"}
            ).encode(),
            b"apiVersion",
        ),
        (
            json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}).encode(),
            b"request.uid",
        ),
    ],
)
def test_a_body_that_is_not_an_admission_review_is_http_400(
    webhook: RunningWebhook, body: bytes, reason: bytes
) -> None:
    status, data = webhook.post(body)
    assert status == 400
    assert reason in data


def test_a_body_over_the_limit_is_refused_unread(webhook: RunningWebhook) -> None:
    """Only the headers are sent: the answer must come without the server waiting for the body."""
    conn = webhook.connection()
    conn.putrequest("POST", "/mutate")
    conn.putheader("Content-Length", str(64 * 1024 + 1))
    conn.endheaders()
    response = conn.getresponse()
    assert (response.status, response.read()) == (413, b"request body too large")
    conn.close()


def test_health_readiness_and_metrics(webhook: RunningWebhook) -> None:
    assert webhook.get("/healthz") == (200, b"ok")
    assert webhook.get("/readyz") == (503, b"not ready")  # no inventory sync in this harness
    webhook.review(request(gpu_pod()))
    status, metrics = webhook.get("/metrics")
    assert status == 200
    assert b'vgpu_bridge_admissions_total{decision="translated"}' in metrics
    assert b"vgpu_bridge_admission_duration_seconds_bucket" in metrics
    assert webhook.get("/nope")[0] == 404


def test_bookings_answer_503_until_the_claims_are_followed_then_the_cards_sums(
    webhook: RunningWebhook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GET /bookings (what `kubectl vgpu status -n` reads through the service proxy), made again
    at most every BOOKINGS_MAX_AGE_S however often it is asked for."""
    monkeypatch.setattr(server, "BOOKINGS_MAX_AGE_S", 3600.0)
    assert webhook.admitter.quotas is not None
    assert webhook.admitter.quotas.claims is not None
    claims = webhook.admitter.quotas.claims
    claims.synced.clear()
    assert webhook.get("/bookings") == (503, b"claim bookings not followed yet")
    result = {"request": "gpu", "driver": "gpu.vgpu-bridge.io", "pool": "node-a",
              "device": "gpu-1", "consumedCapacity": {"memory": "10Gi", "cores": "30"}}  # fmt: skip
    claim = {"metadata": {"namespace": "team-a", "name": "c"},
             "status": {"allocation": {"devices": {"results": [result]}}}}  # fmt: skip
    claims.replace([])
    claims.apply("ADDED", claim)
    status, body = webhook.get("/bookings")
    assert status == 200
    assert json.loads(body) == {
        "apiVersion": "vgpu-bridge.io/v1",
        "kind": "CardBookings",
        "cards": [{"node": "node-a", "device": "gpu-1", "memory": 10 * 2**30, "cores": 30,
                   "shares": 1}],
    }  # fmt: skip
    claims.apply("DELETED", claim)
    assert webhook.get("/bookings") == (200, body)  # the one made, until it is old enough
    monkeypatch.setattr(server, "BOOKINGS_MAX_AGE_S", 0.0)
    assert json.loads(webhook.get("/bookings")[1])["cards"] == []


def _peer_certificate(webhook: RunningWebhook) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    conn = webhook.connection()
    conn._context = context  # type: ignore[attr-defined]  # accept whichever certificate is served
    conn.connect()
    assert conn.sock is not None
    der = conn.sock.getpeercert(binary_form=True)
    conn.close()
    assert der is not None
    return bytes(der)


def test_rotated_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    with running_webhook(tmp_path) as webhook:
        before = _peer_certificate(webhook)
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        cert, key = write_self_signed(fresh)
        webhook.cert_file.write_bytes(cert.read_bytes())
        webhook.key_file.write_bytes(key.read_bytes())
        assert webhook.server.tls.reload_if_changed()
        assert _peer_certificate(webhook) != before
        assert webhook.review(request(gpu_pod()))["allowed"] is True  # trusted under the new cert


JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=300) | JUNK.map(lambda j: json.dumps(j).encode()))
def test_fuzzed_bodies_get_400_or_an_answer_never_a_crash(
    webhook: RunningWebhook, body: bytes
) -> None:
    status, _ = webhook.post(body)
    assert status in (200, 400)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.dictionaries(
        st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores", "cpu"]),
        JUNK,
        max_size=3,
    ),
    st.dictionaries(
        st.sampled_from(["nvidia.com/use-gputype", "gpu-fraction", "x"]), JUNK, max_size=2
    ),
)
def test_fuzzed_pods_are_admitted_or_denied_never_a_crash(
    webhook: RunningWebhook, limits: dict[str, Any], annotations: dict[str, Any]
) -> None:
    pod = gpu_pod({"cpu": "1"})
    pod["spec"]["containers"][0]["resources"]["limits"] = limits
    pod["metadata"]["annotations"] = annotations
    response = webhook.review(request(pod))
    assert response["uid"] == "u-1"
    assert isinstance(response["allowed"], bool)
