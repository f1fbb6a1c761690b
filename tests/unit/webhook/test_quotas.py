"""HAMi's namespace GPU quotas at admission: the claims of our class that exist plus what the pod's
templates would make must stay within each hard limit on `nvidia.com/gpumem`, `gpucores` and the
card count; the denial names the quota and the numbers. Against a real KubeApi and a recorder."""

from __future__ import annotations

from typing import Any

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over, pod_response
from vgpu_bridge.core import DEFAULT, Inventory, TranslatorConfig
from vgpu_bridge.core.dialects import hami
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.quotas import GpuQuota, QuotaCache, QuotaGate, gpu_quotas

QUOTAS = "/api/v1/namespaces/team-a/resourcequotas"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims"
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates"


def admitter_for(api: RecordingApi, *, memory_factor: int = 1) -> Admitter:
    cache = QuotaCache(api.api, names=hami.RESOURCES)
    gate = QuotaGate(api=api.api, cache=cache, profile=DEFAULT, names=hami.RESOURCES,
                     inventory=Inventory, memory_factor=memory_factor)  # fmt: skip
    config = TranslatorConfig(memory_factor=memory_factor)
    return admitter_over(api, config=config, quotas=gate)


def quota(name: str, **hard: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a"}, "spec": {"hard": hard}}


def held(devices: int, memory: str, cores: int) -> dict[str, Any]:
    """An allocated claim of our class holding `devices` shares of `memory` and `cores` each."""
    request = {"deviceClassName": DEFAULT.device_class, "count": devices}
    result = {"request": "gpu", "driver": DEFAULT.driver, "device": "gpu-0",
              "consumedCapacity": {"memory": memory, "cores": str(cores)}}  # fmt: skip
    return {
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
        "status": {"allocation": {"devices": {"results": [result] * devices}}},
    }


def namespace_holds(api: RecordingApi, quotas: list[dict[str, Any]], claims: list[Any]) -> None:
    api.answer("GET", QUOTAS, 200, {"items": quotas})
    api.answer("GET", CLAIMS, 200, {"items": claims})
    api.answer("GET", TEMPLATES, 200, {"items": []})  # an admitted pod's template is made
    api.answer("POST", TEMPLATES, 201)


def asked_for(api: RecordingApi) -> list[str]:
    """The quota and claim look-ups made so far (template look-ups and creates left out)."""
    return [c.path for c in api.calls if c.path in (QUOTAS, CLAIMS)]


def pod(limits: dict[str, Any], **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [container], **spec}}  # fmt: skip


def message(response: dict[str, Any]) -> str:
    assert response["allowed"] is False, response
    return str(response["status"]["message"])


def test_a_pod_past_the_memory_quota_is_refused_naming_the_quota_and_the_numbers(
    recorded: RecordingApi,
) -> None:
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpumem": "10000"})],
                    [held(1, "5000Mi", 0), held(1, "3000Mi", 0)])  # fmt: skip
    response = pod_response(admitter_for(recorded), pod({"nvidia.com/gpumem": 3000}))
    assert message(response) == (
        "exceeded quota team-gpu: limits.nvidia.com/gpumem: requested 3000, used 8000, "
        "limited 10000"
    )


def test_a_pod_that_fits_its_quota_is_translated(recorded: RecordingApi) -> None:
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpumem": "10000"})],
                    [held(1, "7000Mi", 0)])  # fmt: skip
    response = pod_response(admitter_for(recorded), pod({"nvidia.com/gpumem": 3000}))
    assert response["allowed"] is True
    assert "patch" in response


def test_the_card_count_and_cores_are_counted_per_device(recorded: RecordingApi) -> None:
    hard = {"requests.nvidia.com/gpu": "2", "limits.nvidia.com/gpucores": "100"}
    namespace_holds(recorded, [quota("cards", **hard)], [held(1, "1Gi", 60)])
    limits = {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 30}
    assert message(pod_response(admitter_for(recorded), pod(limits))).split("; ") == [
        "exceeded quota cards: limits.nvidia.com/gpucores: requested 60, used 60, limited 100",
        "exceeded quota cards: requests.nvidia.com/gpu: requested 2, used 1, limited 2",
    ]


def test_gpumem_quota_is_in_gpumem_units_under_a_memory_factor(recorded: RecordingApi) -> None:
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpumem": "5000"})],
                    [held(1, "8000Mi", 0)])  # fmt: skip
    response = pod_response(
        admitter_for(recorded, memory_factor=2), pod({"nvidia.com/gpumem": 1500})
    )
    assert message(response) == (
        "exceeded quota team-gpu: limits.nvidia.com/gpumem: requested 1500, used 4000, limited 5000"
    )


def test_a_pod_made_from_a_translated_template_is_counted_too(recorded: RecordingApi) -> None:
    """A Deployment's pods carry no GPU key, only the template the webhook made for it."""
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpu": "1"})],
                    [held(1, "1Gi", 0)])  # fmt: skip
    request = {"deviceClassName": DEFAULT.device_class, "count": 1,
               "capacity": {"requests": {"memory": "1Gi", "cores": "0"}}}  # fmt: skip
    recorded.objects[f"{TEMPLATES}/vgpu-0123456789abcdef"] = {
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}}
    }
    claims = [{"name": "gpu", "resourceClaimTemplateName": "vgpu-0123456789abcdef"}]
    response = pod_response(admitter_for(recorded), pod({"cpu": "1"}, resourceClaims=claims))
    assert message(response) == (
        "exceeded quota team-gpu: limits.nvidia.com/gpu: requested 1, used 1, limited 1"
    )


def test_an_opted_out_pod_naming_our_template_is_counted_all_the_same(
    recorded: RecordingApi,
) -> None:
    """The opt-out label skips translation, not the quota: the claim it names is ours."""
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpu": "1"})],
                    [held(1, "1Gi", 0)])  # fmt: skip
    request = {"deviceClassName": DEFAULT.device_class, "count": 1}
    recorded.objects[f"{TEMPLATES}/vgpu-0123456789abcdef"] = {
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}}
    }
    claims = [{"name": "gpu", "resourceClaimTemplateName": "vgpu-0123456789abcdef"}]
    obj = pod({"nvidia.com/gpu": 1}, resourceClaims=claims)
    obj["metadata"]["labels"] = {"vgpu-bridge.io/ignore": "true"}
    assert message(pod_response(admitter_for(recorded), obj)) == (
        "exceeded quota team-gpu: limits.nvidia.com/gpu: requested 1, used 1, limited 1"
    )
    assert recorded.made("POST") == []


def test_a_pod_naming_a_missing_template_under_a_gpu_quota_is_refused(
    recorded: RecordingApi,
) -> None:
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpu": "4"})], [])
    claims = [{"name": "gpu", "resourceClaimTemplateName": "not-there"}]
    response = pod_response(admitter_for(recorded), pod({}, resourceClaims=claims))
    assert "template not-there does not exist" in message(response)


def test_a_whole_card_of_unknown_size_cannot_be_counted_against_a_memory_quota(
    recorded: RecordingApi,
) -> None:
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpumem": "10000"})], [])
    response = pod_response(admitter_for(recorded), pod({"nvidia.com/gpu": 1}))
    assert "a whole card's memory is unknown" in message(response)


def test_a_pod_without_gpus_or_claims_costs_no_api_call(recorded: RecordingApi) -> None:
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpu": "0"})], [])
    response = pod_response(admitter_for(recorded), pod({"cpu": "1"}))
    assert response["allowed"] is True
    assert recorded.calls == []


def test_a_namespace_without_gpu_quotas_lists_no_claims(recorded: RecordingApi) -> None:
    namespace_holds(recorded, [quota("cpu-only", **{"limits.cpu": "4"})], [held(9, "80Gi", 100)])
    response = pod_response(admitter_for(recorded), pod({"nvidia.com/gpumem": 3000}))
    assert response["allowed"] is True
    assert asked_for(recorded) == [QUOTAS]


def test_a_synced_cache_answers_without_listing_quotas(recorded: RecordingApi) -> None:
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpu": "0"})], [])
    admitter = admitter_for(recorded)
    assert admitter.quotas is not None
    admitter.quotas.cache.replace([quota("cpu-only", **{"limits.cpu": "4"})])
    assert pod_response(admitter, pod({"nvidia.com/gpumem": 3000}))["allowed"] is True
    assert asked_for(recorded) == []


def test_a_dry_run_books_nothing_and_is_not_counted(recorded: RecordingApi) -> None:
    """`--dry-run=server` needs no API call; the real create is counted."""
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpu": "0"})], [])
    response = pod_response(admitter_for(recorded), pod({"nvidia.com/gpumem": 3000}), dry_run=True)
    assert response["allowed"] is True
    assert recorded.calls == []


def test_gpu_quotas_reads_limits_and_requests_of_hami_names_only() -> None:
    hard = {"limits.nvidia.com/gpumem": "10k", "requests.nvidia.com/gpu": "2",
            "limits.nvidia.com/gpucores": "300", "limits.cpu": "4", "nvidia.com/gpu": "1",
            "requests.nvidia.com/gpumem-percentage": "50", "count/pods": "10"}  # fmt: skip
    assert gpu_quotas(quota("q", **hard), hami.RESOURCES) == [
        GpuQuota("q", "limits.nvidia.com/gpucores", "cores", 300),
        GpuQuota("q", "limits.nvidia.com/gpumem", "memory", 10000),
        GpuQuota("q", "requests.nvidia.com/gpu", "devices", 2),
    ]


def test_the_cache_follows_added_changed_and_deleted_quotas(recorded: RecordingApi) -> None:
    cache = QuotaCache(recorded.api, names=hami.RESOURCES)
    assert cache.in_namespace("team-a") is None  # not listed yet: ask the API server
    cache.replace([quota("a", **{"limits.nvidia.com/gpu": "1"})])
    cache.apply("ADDED", quota("b", **{"limits.nvidia.com/gpucores": "50"}))
    assert {q.quota for q in cache.in_namespace("team-a") or ()} == {"a", "b"}
    cache.apply("MODIFIED", quota("a", **{"limits.cpu": "1"}))
    cache.apply("DELETED", quota("b"))
    assert cache.in_namespace("team-a") == []
    cache.synced.clear()  # the watch stopped: unknown until it has listed again
    assert cache.in_namespace("team-a") is None


def test_a_claim_written_by_hand_is_paid_for_by_its_first_pod(recorded: RecordingApi) -> None:
    """Claims are made without our admission; the first pod that names one books it."""
    big = {"metadata": {"name": "big"}, **held(1, "8Gi", 0)}
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpumem": "10240"})],
                    [held(1, "4Gi", 0), big])  # fmt: skip
    recorded.objects[f"{CLAIMS}/big"] = big
    claims = [{"name": "gpu", "resourceClaimName": "big"}]
    response = pod_response(admitter_for(recorded), pod({"cpu": "1"}, resourceClaims=claims))
    assert message(response) == (
        "exceeded quota team-gpu: limits.nvidia.com/gpumem: requested 8192, used 4096, "
        "limited 10240"
    )


def test_a_pod_sharing_a_claim_in_use_books_nothing_new(recorded: RecordingApi) -> None:
    shared = {"metadata": {"name": "shared"}, **held(1, "8Gi", 0)}
    shared["status"]["reservedFor"] = [{"resource": "pods", "name": "first", "uid": "u"}]
    namespace_holds(recorded, [quota("team-gpu", **{"limits.nvidia.com/gpumem": "8192"})],
                    [shared])  # fmt: skip
    recorded.objects[f"{CLAIMS}/shared"] = shared
    claims = [{"name": "gpu", "resourceClaimName": "shared"}]
    assert pod_response(admitter_for(recorded), pod({}, resourceClaims=claims))["allowed"] is True


def test_gpu_quotas_reads_volcanos_names_beside_hamis_but_no_percentage() -> None:
    hard = {"requests.volcano.sh/vgpu-number": "4", "requests.volcano.sh/vgpu-memory": "20k",
            "limits.volcano.sh/vgpu-cores": "200", "nvidia.com/gpumem": "1",
            "requests.volcano.sh/vgpu-memory-percentage": "50"}  # fmt: skip
    assert gpu_quotas(quota("q", **hard), hami.RESOURCES) == [
        GpuQuota("q", "limits.volcano.sh/vgpu-cores", "cores", 200),
        GpuQuota("q", "requests.volcano.sh/vgpu-memory", "memory", 20000),
        GpuQuota("q", "requests.volcano.sh/vgpu-number", "devices", 4),
    ]


def test_a_volcano_memory_quota_counts_every_claim_per_device(recorded: RecordingApi) -> None:
    """Volcano's vgpu-memory is MiB per vGPU: two cards of 2000 book 4000, whichever vocabulary
    made the claims already held."""
    hard = {"requests.volcano.sh/vgpu-memory": "10000", "requests.volcano.sh/vgpu-number": "8"}
    namespace_holds(recorded, [quota("vc", **hard)], [held(1, "5000Mi", 0), held(1, "2000Mi", 0)])
    limits = {"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 2000}
    assert message(pod_response(admitter_for(recorded), pod(limits))) == (
        "exceeded quota vc: requests.volcano.sh/vgpu-memory: requested 4000, used 7000, "
        "limited 10000"
    )
