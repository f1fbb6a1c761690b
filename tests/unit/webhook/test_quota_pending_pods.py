"""Whole-card pods admitted but not yet bound count against the namespace's GPU quota (issue 35,
item 4, its last gap). kube-scheduler makes such a pod's claim only when it binds it: counted only
at its own admission, it was invisible to the next ones, so a tenant who created many whole-card
pods at once (each seeing only the claims) overshot the quota once they bound. The webhook now
follows the cluster's unbound pods (`spec.nodeName=`) and holds, per namespace, the uid and card
count of each that asks whole cards of our class; a pod whose extended-resource claim exists is
counted by that claim only; past the bounds, or before the first list, it lists the namespace's
unbound pods at admission."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over, pod_response
from tests.unit.webhook.test_quota_extended_resources import (
    CARDS,
    EXTENDED,
    IMPLICIT,
    scheduler_claim,
    whole_cards,
)
from tests.unit.webhook.test_quotas import held, message, namespace_holds, quota
from vgpu_bridge.core import DEFAULT, TranslatorConfig
from vgpu_bridge.core.dialects import hami
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.claim_bookings import ClaimBookings, held_by
from vgpu_bridge.webhook.pending_pods import UNBOUND, PendingWholeCards
from vgpu_bridge.webhook.quotas import QuotaCache, QuotaGate

PODS = "/api/v1/namespaces/team-a/pods"
NAMES = (IMPLICIT, EXTENDED)
TWO_CARDS = {"requests.nvidia.com/gpu": "2"}


def waiting_pod(uid: str, cards: int, *, namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    """An opted-out whole-card pod as the API server holds it once created, not yet bound."""
    made = whole_cards({EXTENDED: cards})
    made["metadata"].update(name=f"pod-{uid}", namespace=namespace, uid=uid)
    made["spec"].update(spec)
    return made


def owned_claim(owner_uid: str, cards: int) -> dict[str, Any]:
    """kube-scheduler's claim for pod `owner_uid`, made at PreBind (the pod not yet bound)."""
    claim = scheduler_claim(cards)
    owner = {"apiVersion": "v1", "kind": "Pod", "name": f"pod-{owner_uid}", "uid": owner_uid,
             "controller": True}  # fmt: skip
    claim["metadata"].update(namespace="team-a", ownerReferences=[owner])
    return claim


def gate_over(
    recorded: RecordingApi, pending: PendingWholeCards, claims: ClaimBookings | None = None
) -> Admitter:
    gate = QuotaGate(api=recorded.api, cache=QuotaCache(recorded.api, names=hami.RESOURCES),
                     profile=DEFAULT, names=hami.RESOURCES, inventory=lambda: CARDS,
                     claims=claims, extended_names=(EXTENDED,), pending=pending)  # fmt: skip
    return admitter_over(recorded, config=TranslatorConfig(), quotas=gate, inventory=lambda: CARDS)


def followed(recorded: RecordingApi, *pods: dict[str, Any], **bounds: int) -> PendingWholeCards:
    """The watch after its first list of `pods`, each trimmed as the list trims it."""
    pending = PendingWholeCards(recorded.api, names=NAMES, **bounds)
    pending.replace(kept for p in pods if (kept := pending._keep(p)) is not None)
    return pending


def test_a_second_whole_card_pod_is_refused_while_the_first_is_not_yet_bound(
    recorded: RecordingApi,
) -> None:
    """A 2-card quota, no claim yet: pod one (2 cards) admitted, then created and still waiting
    for kube-scheduler; pod two (1 card) now sees it."""
    namespace_holds(recorded, [quota("cards", **TWO_CARDS)], [])
    pending = followed(recorded)
    admitter = gate_over(recorded, pending)
    assert pod_response(admitter, whole_cards({EXTENDED: 2}))["allowed"] is True
    pending.apply("ADDED", waiting_pod("one", 2))  # the API server stored it: the watch says so

    assert message(pod_response(admitter, whole_cards({EXTENDED: 1}))) == (
        "exceeded quota cards: requests.nvidia.com/gpu: requested 1, used 2, limited 2"
    )
    assert PODS not in [c.path for c in recorded.calls]  # followed: no list per admission


def test_a_share_is_refused_beside_whole_cards_waiting(recorded: RecordingApi) -> None:
    namespace_holds(recorded, [quota("cards", **TWO_CARDS)], [])
    pending = followed(recorded, waiting_pod("one", 1), waiting_pod("two", 1))
    share = whole_cards({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}, name="s")
    assert message(pod_response(gate_over(recorded, pending), share)) == (
        "exceeded quota cards: requests.nvidia.com/gpu: requested 1, used 2, limited 2"
    )


def test_once_its_claim_exists_the_waiting_pod_is_counted_by_the_claim_only(
    recorded: RecordingApi,
) -> None:
    """kube-scheduler made pod one's claim (PreBind) and has not bound it yet: the claim watch
    holds the claim, the pod watch still the pod. One count of 2 for both, so 2 more fit a quota
    of 4, and 3 do not (used 2, not 4)."""
    namespace_holds(recorded, [quota("cards", **{"requests.nvidia.com/gpu": "4"})], [])
    claims = ClaimBookings(recorded.api, profile=DEFAULT)
    claims.replace([{"where": ("team-a", "one-claim"), "held": held_by(owned_claim("one", 2),
                                                                        DEFAULT)}])  # fmt: skip
    admitter = gate_over(recorded, followed(recorded, waiting_pod("one", 2)), claims)
    assert pod_response(admitter, whole_cards({EXTENDED: 2}))["allowed"] is True
    assert message(pod_response(admitter, whole_cards({EXTENDED: 3}))) == (
        "exceeded quota cards: requests.nvidia.com/gpu: requested 3, used 2, limited 4"
    )


def test_without_the_watch_the_owned_claim_from_the_list_still_counts_the_pod_once(
    recorded: RecordingApi,
) -> None:
    """Before either watch has listed: the claims and the unbound pods are listed at admission,
    and the listed claim's owner leaves the listed pod out."""
    namespace_holds(recorded, [quota("cards", **{"requests.nvidia.com/gpu": "4"})],
                    [owned_claim("one", 2)])  # fmt: skip
    recorded.answer("GET", PODS, 200, {"items": [waiting_pod("one", 2), waiting_pod("two", 1)]})
    pending = PendingWholeCards(recorded.api, names=NAMES)
    admitter = gate_over(recorded, pending, ClaimBookings(recorded.api, profile=DEFAULT))
    assert message(pod_response(admitter, whole_cards({EXTENDED: 2}))) == (
        "exceeded quota cards: requests.nvidia.com/gpu: requested 2, used 3, limited 4"
    )
    listed = [c for c in recorded.calls if c.path == PODS]
    assert [c.query.get("fieldSelector") for c in listed] == [UNBOUND]


def test_a_namespace_past_its_bound_is_listed_at_admission(recorded: RecordingApi) -> None:
    """Three waiting pods, two held: the namespace's count is not known from the watch, so the
    gate lists its unbound pods (all three count), until the pod that did not fit is gone."""
    namespace_holds(recorded, [quota("cards", **{"requests.nvidia.com/gpu": "3"})], [])
    pods = [waiting_pod(uid, 1) for uid in ("a", "b", "c")]
    recorded.answer("GET", PODS, 200, {"items": pods})
    pending = followed(recorded, *pods, held_per_namespace=2)
    assert len(pending) == 2
    assert pending.waiting("team-a") is None
    admitter = gate_over(recorded, pending)
    assert "used 3" in message(pod_response(admitter, whole_cards({EXTENDED: 1})))
    assert PODS in [c.path for c in recorded.calls]

    pending.apply("DELETED", pods[2])  # the one not held is bound (it left `spec.nodeName=`)
    assert pending.waiting("team-a") == {"a": 1, "b": 1}


def test_the_bound_in_all_namespaces_holds_too(recorded: RecordingApi) -> None:
    pending = followed(recorded, waiting_pod("a", 1, namespace="x"),
                       waiting_pod("b", 1, namespace="y"), held_in_all=1)  # fmt: skip
    assert pending.waiting("x") == {"a": 1}
    assert pending.waiting("y") is None


def test_bound_finished_deleted_and_plain_pods_wait_for_nothing(recorded: RecordingApi) -> None:
    pending = followed(recorded, waiting_pod("one", 2))
    pending.apply("ADDED", waiting_pod("plain", 0))
    pending.apply("ADDED", waiting_pod("ended", 1) | {"status": {"phase": "Failed"}})
    assert pending.waiting("team-a") == {"one": 2}
    pending.apply("MODIFIED", waiting_pod("one", 2, nodeName="node-a"))  # bound
    assert pending.waiting("team-a") == {}
    pending.apply("ADDED", waiting_pod("two", 1))
    pending.apply("DELETED", waiting_pod("two", 1))
    assert pending.waiting("team-a") == {}
    assert len(pending) == 0


def test_before_its_first_list_the_watch_answers_nothing(recorded: RecordingApi) -> None:
    assert PendingWholeCards(recorded.api, names=NAMES).waiting("team-a") is None


def event_line(pod: dict[str, Any], version: str = "41") -> bytes:
    """A watch event as kube-apiserver writes it (Go's field order, no spaces)."""
    obj = {"kind": "Pod", "apiVersion": "v1",
           "metadata": {"name": pod["metadata"]["name"], "namespace": "team-a",
                        "uid": pod["metadata"]["uid"], "resourceVersion": version},
           "spec": pod["spec"]}  # fmt: skip
    return json.dumps({"type": "ADDED", "object": obj}, separators=(",", ":")).encode()


def test_a_pod_event_naming_no_whole_card_resource_is_passed_over_undecoded(
    recorded: RecordingApi,
) -> None:
    pending = PendingWholeCards(recorded.api, names=NAMES)
    plain = waiting_pod("plain", 0)
    plain["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert pending.screen(event_line(plain)) == {
        "type": "SKIPPED", "object": {"metadata": {"resourceVersion": "41"}}}  # fmt: skip
    assert pending.screen(event_line(waiting_pod("gpu", 1))) is None
    assert pending.screen(b'{"type":"BOOKMARK","object":{}}') is None


def test_its_share_pods_and_claims_alone_are_counted_as_before(recorded: RecordingApi) -> None:
    """Nothing waits: the claims are what is used."""
    namespace_holds(recorded, [quota("cards", **TWO_CARDS)], [held(1, "1Gi", 10)])
    admitter = gate_over(recorded, followed(recorded))
    assert pod_response(admitter, whole_cards({EXTENDED: 1}))["allowed"] is True
