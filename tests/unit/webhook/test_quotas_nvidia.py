"""HAMi's namespace GPU quotas under the nvidia profile: claims of NVIDIA's class count (memory,
and shares as the percent of the card they are), our enforcer beside each share counts as no
card, and a translated pod's own share is counted before it is made. Against a real KubeApi and
a recorder."""

from __future__ import annotations

from typing import Any

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over, pod_response
from vgpu_bridge.core import ENFORCER_DRIVER, ENFORCER_REQUEST, Inventory, nvidia_profile
from vgpu_bridge.core.dialects import hami
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.claim_bookings import held_by
from vgpu_bridge.webhook.quotas import QuotaCache, QuotaGate

QUOTAS = "/api/v1/namespaces/team-a/resourcequotas"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims"
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates"


def admitter_for(api: RecordingApi, mode: str = "100") -> Admitter:
    profile = nvidia_profile(mode)
    cache = QuotaCache(api.api, names=hami.RESOURCES)
    gate = QuotaGate(api=api.api, cache=cache, profile=profile, names=hami.RESOURCES,
                     inventory=Inventory)  # fmt: skip
    return admitter_over(api, quotas=gate, profile=profile)


def quota(**hard: Any) -> dict[str, Any]:
    return {"metadata": {"name": "team-gpu", "namespace": "team-a"}, "spec": {"hard": hard}}


def held(memory: str, shares: int | None) -> dict[str, Any]:
    """An allocated claim holding one NVIDIA share and our enforcer beside it."""
    consumed = {"memory": memory, **({"shares": str(shares)} if shares is not None else {})}
    requests = [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1}},
        {"name": ENFORCER_REQUEST, "exactly": {"deviceClassName": ENFORCER_DRIVER, "count": 1}},
    ]
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0",
         "shareID": "a", "consumedCapacity": consumed},
        {"request": ENFORCER_REQUEST, "driver": ENFORCER_DRIVER, "pool": "n1",
         "device": "enforcer", "shareID": "b"},
    ]  # fmt: skip
    return {"metadata": {"name": "c", "namespace": "team-a"},
            "spec": {"devices": {"requests": requests}},
            "status": {"allocation": {"devices": {"results": results}}}}  # fmt: skip


def namespace_holds(api: RecordingApi, hard: dict[str, str], claims: list[Any]) -> None:
    api.answer("GET", QUOTAS, 200, {"items": [quota(**hard)]})
    api.answer("GET", CLAIMS, 200, {"items": claims})
    api.answer("GET", TEMPLATES, 200, {"items": []})
    api.answer("POST", TEMPLATES, 201)


def pod(limits: dict[str, Any]) -> dict[str, Any]:
    container = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [container]}}  # fmt: skip


def message(response: dict[str, Any]) -> str:
    assert response["allowed"] is False, response
    return str(response["status"]["message"])


SHARE = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}


def test_nvidia_shares_count_their_cards_memory_and_shares_as_percent(
    recorded: RecordingApi,
) -> None:
    hard = {"limits.nvidia.com/gpu": "3", "limits.nvidia.com/gpumem": "10000",
            "limits.nvidia.com/gpucores": "100"}  # fmt: skip
    namespace_holds(recorded, hard, [held("5000Mi", 50), held("1000Mi", 40)])
    assert message(pod_response(admitter_for(recorded), pod(SHARE))).split("; ") == [
        "exceeded quota team-gpu: limits.nvidia.com/gpucores: requested 30, used 90, limited 100"
    ]  # the enforcer beside each share is no card: 2 used, not 4


def test_shares_of_another_n_count_as_the_percent_of_the_card_they_are(
    recorded: RecordingApi,
) -> None:
    namespace_holds(recorded, {"limits.nvidia.com/gpucores": "100"}, [held("1Gi", 2)])
    # 4 shares per card: 2 held are 50%; gpucores 60 books ceil(60*4/100) = 3 shares, 75%
    response = pod_response(admitter_for(recorded, "4"), pod({**SHARE, "nvidia.com/gpucores": 60}))
    assert message(response) == (
        "exceeded quota team-gpu: limits.nvidia.com/gpucores: requested 75, used 50, limited 100"
    )


def test_a_share_that_fits_is_translated(recorded: RecordingApi) -> None:
    namespace_holds(recorded, {"limits.nvidia.com/gpumem": "10000"}, [held("5000Mi", 50)])
    response = pod_response(admitter_for(recorded), pod(SHARE))
    assert response["allowed"] is True, response


def test_claim_bookings_of_nvidias_class_ignore_the_enforcer() -> None:
    """The cache that follows claims for the quotas (ClaimBookings) reads NVIDIA's results
    only."""
    found = held_by(held("2Gi", 25), nvidia_profile())
    assert found is not None
    assert (found.booking.devices, found.booking.memory_bytes, found.booking.cores) == (
        1, 2 * 2**30, 25
    )  # fmt: skip
