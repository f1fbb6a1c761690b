"""`status -n` reads the cards' bookings from the webhook's GET /bookings (through the API
server's service proxy) instead of listing every claim of the cluster (issue 26): the sums the
webhook's own claim watch makes of the recorded claims are served, and the view shows the same
BOOKED, FREE and USED as when it lists every claim, without that list. A webhook that does not
answer (not following yet, not allowed, not found) leaves the view listing the claims. The
webhook is the Service our MutatingWebhookConfiguration sends reviews to (issue 35): a Service
that only carries our labels may be any tenant's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi, recording_api
from tests.unit.status.recorded import NAMESPACE, recorded
from tests.unit.status.served_api import ServedApi
from tests.unit.status.test_command import RESOURCE, api, document  # noqa: F401 - the fixture
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.status.card_bookings import BookingsError, parse_bookings
from vgpu_bridge.status.release import OUR_SELECTOR, WEBHOOK_CONFIGURATIONS
from vgpu_bridge.webhook.claim_bookings import ClaimBookings, bookings_document, held_by, where

SERVICE = "/api/v1/namespaces/vgpu-bridge/services/vgpu-bridge-webhook"
BOOKINGS = "/api/v1/namespaces/vgpu-bridge/services/https:vgpu-bridge-webhook:https/proxy/bookings"
EVERY_CLAIM = f"{RESOURCE}/resourceclaims"


@pytest.fixture
def recorded_api() -> Iterator[RecordingApi]:
    """The webhook's client (its claim watch is fed the recorded claims, not run)."""
    with recording_api() as made:
        yield made


def webhook_sums(recording: RecordingApi) -> dict[str, Any]:
    """What the webhook serves after its claim watch listed the recorded claims."""
    claims = ClaimBookings(recording.api, profile=DEFAULT)
    kept = [{"where": where(c), "held": h} for c in recorded("claims")
            if (h := held_by(c, DEFAULT)) is not None]  # fmt: skip
    claims.replace(kept)
    sums = claims.cards()
    assert sums is not None
    return bookings_document(sums)


def configuration(*services: tuple[str, str]) -> dict[str, Any]:
    """A MutatingWebhookConfiguration of ours whose webhooks call `services` (namespace, name)."""
    hooks = [{"name": f"h{i}.vgpu-bridge.io", "clientConfig": {"service": {
        "namespace": namespace, "name": name, "port": 443}}}
        for i, (namespace, name) in enumerate(services)]  # fmt: skip
    return {"metadata": {"name": "vgpu-bridge"}, "webhooks": hooks}


def with_webhook(served: ServedApi, recording: RecordingApi) -> None:
    """The chart's webhook: its configuration names its Service, which answers /bookings."""
    served.list_of(WEBHOOK_CONFIGURATIONS, [configuration(("vgpu-bridge", "vgpu-bridge-webhook"))],
                   labelSelector=OUR_SELECTOR)  # fmt: skip
    served.serve(SERVICE, {"spec": {"ports": [{"name": "https", "port": 443}]}})
    served.serve(BOOKINGS, webhook_sums(recording))


TENANT = "/api/v1/namespaces/aaa-tenant/services/vgpu-bridge-webhook"
TENANT_BOOKINGS = (
    "/api/v1/namespaces/aaa-tenant/services/https:vgpu-bridge-webhook:https/proxy/bookings"
)


def with_a_tenants_lookalike(served: ServedApi) -> None:
    """A tenant's Service with the webhook's labels, in a namespace that sorts first, whose pod
    claims every card is free."""
    labels = {"app.kubernetes.io/name": "vgpu-bridge", "app.kubernetes.io/component": "webhook"}
    lookalike = {"metadata": {"name": "vgpu-bridge-webhook", "namespace": "aaa-tenant",
                              "labels": labels}}  # fmt: skip
    served.list_of("/api/v1/services", [lookalike])
    served.serve(TENANT, {"spec": {"ports": [{"name": "https", "port": 443}]}})
    served.serve(TENANT_BOOKINGS, {"kind": "CardBookings", "apiVersion": "vgpu-bridge.io/v1",
                                   "cards": []})  # fmt: skip


def test_a_service_with_our_labels_in_a_tenants_namespace_is_never_asked(
    api: ServedApi,  # noqa: F811
    tmp_path: Any,
    recorded_api: RecordingApi,
) -> None:
    listed = listed_then_webhook(api, tmp_path, recorded_api)
    api.answers = {k: v for k, v in api.answers.items() if k[0] != WEBHOOK_CONFIGURATIONS}
    with_a_tenants_lookalike(api)
    served = document(api, tmp_path, "-n", NAMESPACE, "--agent-namespace", "vgpu-bridge")
    assert cards(served) == listed  # the claims' sums, not the lookalike's empty cards
    assert all(path not in (TENANT, TENANT_BOOKINGS) for path, _ in api.asked)
    assert any(path == EVERY_CLAIM for path, _ in api.asked)


def test_the_lookalike_is_not_asked_beside_the_configured_webhook(
    api: ServedApi,  # noqa: F811
    tmp_path: Any,
    recorded_api: RecordingApi,
) -> None:
    listed = listed_then_webhook(api, tmp_path, recorded_api)
    with_a_tenants_lookalike(api)
    served = document(api, tmp_path, "-n", NAMESPACE)
    assert cards(served) == listed
    assert any(path == BOOKINGS for path, _ in api.asked)
    assert all(path not in (TENANT, TENANT_BOOKINGS) for path, _ in api.asked)


def test_a_configuration_that_calls_a_url_or_no_service_leaves_the_claims_listed(
    api: ServedApi,  # noqa: F811
    tmp_path: Any,
    recorded_api: RecordingApi,
) -> None:
    listed = listed_then_webhook(api, tmp_path, recorded_api)
    by_url = {"metadata": {"name": "x"}, "webhooks": [
        {"name": "a.vgpu-bridge.io", "clientConfig": {"url": "https://example.com/mutate"}},
        {"name": "b.vgpu-bridge.io", "clientConfig": {"service": {"namespace": "../x"}}},
        "not a webhook"]}  # fmt: skip
    api.list_of(WEBHOOK_CONFIGURATIONS, [by_url, {"webhooks": None}], labelSelector=OUR_SELECTOR)
    served = document(api, tmp_path, "-n", NAMESPACE, "--agent-namespace", "vgpu-bridge")
    assert cards(served) == listed
    assert any(path == EVERY_CLAIM for path, _ in api.asked)
    assert served["notes"] == []


def cards(found: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(c["device"], c["bookedMemory"], c["bookedCores"], c["freeMemory"], c["usedMemory"])
            for c in found["cards"]]  # fmt: skip


def listed_then_webhook(served: ServedApi, tmp_path: Any, recording: RecordingApi) -> list[Any]:
    """The cards `-n` shows from every claim; then the webhook behind its Service, asked afresh."""
    listed = cards(document(served, tmp_path, "-n", NAMESPACE))
    assert any(path == EVERY_CLAIM for path, _ in served.asked)
    with_webhook(served, recording)
    served.asked.clear()
    return listed


def test_the_webhooks_sums_show_what_every_claim_shows_without_listing_them(
    api: ServedApi,  # noqa: F811
    tmp_path: Any,
    recorded_api: RecordingApi,
) -> None:
    listed = listed_then_webhook(api, tmp_path, recorded_api)
    served = document(api, tmp_path, "-n", NAMESPACE)
    assert cards(served) == listed
    assert cards(served)[0][1:3] == (71000 * 2**20, 85)  # infer-a, infer-b and OTHER's neighbour
    assert {s["pod"] for s in served["cards"][0]["shares"]} == {"infer-a", "infer-b"}
    assert served["notes"] == []
    assert all(path != EVERY_CLAIM for path, _ in api.asked)
    assert any(path == BOOKINGS for path, _ in api.asked)


@pytest.mark.parametrize("answer", [503, 403, "not ours"])
def test_a_webhook_that_does_not_answer_leaves_the_claims_listed(
    api: ServedApi,  # noqa: F811
    tmp_path: Any,
    recorded_api: RecordingApi,
    answer: int | str,
) -> None:
    listed = listed_then_webhook(api, tmp_path, recorded_api)
    if answer == "not ours":
        api.serve(BOOKINGS, {"kind": "Status", "apiVersion": "v1"})
    else:
        api.serve(BOOKINGS, {"kind": "Status", "code": answer}, status=int(answer))
    served = document(api, tmp_path, "-n", NAMESPACE)
    assert cards(served) == listed
    assert any(path == EVERY_CLAIM for path, _ in api.asked)
    assert served["notes"] == []


def test_a_named_service_that_fails_is_a_note_and_the_claims_are_listed(
    api: ServedApi,  # noqa: F811
    tmp_path: Any,
    recorded_api: RecordingApi,
) -> None:
    listed = listed_then_webhook(api, tmp_path, recorded_api)
    api.forbid(BOOKINGS)
    served = document(api, tmp_path, "-n", NAMESPACE, "--webhook-service",
                      "vgpu-bridge/vgpu-bridge-webhook")  # fmt: skip
    assert cards(served) == listed
    (note,) = served["notes"]
    assert note.startswith("the webhook's bookings (vgpu-bridge/vgpu-bridge-webhook): not read")
    assert "403" in note


def test_all_namespaces_never_asks_the_webhook(
    api: ServedApi,  # noqa: F811
    tmp_path: Any,
    recorded_api: RecordingApi,
) -> None:
    with_webhook(api, recorded_api)
    document(api, tmp_path, "-A")
    assert all(path != BOOKINGS for path, _ in api.asked)
    api.asked.clear()  # the configurations are read for the agents' namespace, unless named
    document(api, tmp_path, "-A", "--agent-namespace", "vgpu-bridge")
    assert all(path not in (BOOKINGS, WEBHOOK_CONFIGURATIONS) for path, _ in api.asked)


@pytest.mark.parametrize(
    ("document_", "problem"),
    [
        ({"kind": "CardBookings", "apiVersion": "v2"}, "not a vgpu-bridge.io/v1 CardBookings"),
        ({"kind": "CardBookings", "apiVersion": "vgpu-bridge.io/v1", "cards": {}}, "cards: must"),
        ({"kind": "CardBookings", "apiVersion": "vgpu-bridge.io/v1", "cards": [
            {"node": "n", "device": 3, "memory": 1, "cores": 1}]},
         "cards[0]: node and device must be strings"),
        ({"kind": "CardBookings", "apiVersion": "vgpu-bridge.io/v1", "cards": [
            {"node": "n", "device": "d", "memory": 1, "cores": 1},
            {"node": "n", "device": "e", "memory": -1, "cores": True}]},
         "cards[1]: memory and cores must be whole numbers >= 0"),
    ],
)  # fmt: skip
def test_an_answer_that_is_not_a_card_bookings_document_is_refused_naming_the_field(
    document_: dict[str, Any], problem: str
) -> None:
    with pytest.raises(BookingsError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        parse_bookings(document_)
