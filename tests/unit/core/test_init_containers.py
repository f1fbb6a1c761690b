"""Init containers share a claim with the app containers, booked for the peak HAMi books.

HAMi's rule (`pkg/device/initContainer.go`, CollapseInitContainerUsage): on each card, the larger
of the largest init container's share and the sum of the app containers' shares, per dimension.
The cases named after a HAMi test are ported from `pkg/device/initContainer_test.go` (all on one
card, `gpu0`); the claims here must book on that card exactly what HAMi books.
"""

from __future__ import annotations

import itertools
from decimal import Decimal
from typing import Any

import pytest

from vgpu_bridge.core import TranslationContext, translate
from vgpu_bridge.core.claim_groups import ClaimGroup, ContainerKind, OwnShare, group_claims
from vgpu_bridge.core.models import GpuRequest

Pod = list[tuple[GpuRequest, ContainerKind]]


def share(
    memory: int | None, cores: int, *, count: int = 1, priority: int | None = None
) -> GpuRequest:
    percent = Decimal(100) if memory is None else None
    return GpuRequest(
        count=count, memory_mib=memory, memory_percent=percent, cores=cores, priority=priority
    )


def init(memory: int | None, cores: int = 0, **kw: Any) -> tuple[GpuRequest, ContainerKind]:
    return share(memory, cores, **kw), "init"


def app(memory: int | None, cores: int = 0, **kw: Any) -> tuple[GpuRequest, ContainerKind]:
    return share(memory, cores, **kw), "app"


def booked_on_one_card(groups: list[ClaimGroup]) -> tuple[int, int]:
    """Memory and cores the pod's claims book together when they all land on one card."""
    return sum(g.request.memory_mib or 0 for g in groups), sum(g.request.cores for g in groups)


def limits(pod: Pod, groups: list[ClaimGroup]) -> dict[int, tuple[int | None, int]]:
    """What libvgpu holds each container to: its own share where given, else its claim's."""
    held = {}
    for group in groups:
        for index, own in zip(group.members, group.own, strict=True):
            own = own or OwnShare(None, None)
            memory = own.memory_mib if own.memory_mib is not None else group.request.memory_mib
            held[index] = (memory, own.cores if own.cores is not None else group.request.cores)
    assert sorted(held) == list(range(len(pod)))
    return held


HAMI_CASES = [
    pytest.param([app(100, 10), app(200, 20)], (300, 30), id="NoInitContainers"),
    pytest.param([init(100, 10), init(200, 30)], (200, 30), id="OnlyInitContainers"),
    pytest.param([init(500, 50), app(100, 10)], (500, 50), id="MixedInitAndApp"),
    pytest.param([init(1000, 80), app(200, 20)], (1000, 80), id="InitLargerThanApp"),
    pytest.param([init(100, 10), app(200, 20), app(300, 30)], (500, 50), id="AppLargerThanInit"),
    pytest.param(
        [init(100, 10), init(300, 30), init(200, 20), app(50, 5)],
        (300, 30),
        id="MultipleInitContainersPeak",
    ),
    pytest.param([app(100, 10)] * 3, (300, 30), id="MultiAppSameGPUSlots"),
]


@pytest.mark.parametrize(("pod", "hami_books"), HAMI_CASES)
def test_the_claims_book_on_one_card_what_hami_books(pod: Pod, hami_books: tuple[int, int]) -> None:
    assert booked_on_one_card(group_claims(pod)) == hami_books


def test_an_init_container_and_its_app_share_one_claim_each_held_to_its_own() -> None:
    pod = [init(500, 50), app(100, 10)]
    (group,) = group_claims(pod)
    assert group.members == (0, 1)
    assert (group.request.memory_mib, group.request.cores) == (500, 50)
    assert group.own == (None, OwnShare(100, 10))


def test_init_60gi_and_app_30gi_book_60gi_so_they_fit_an_80gi_card() -> None:
    (group,) = group_claims([init(61440), app(30720)])
    assert group.request.memory_mib == 61440
    assert group.own == (None, OwnShare(30720, None))


def test_apps_join_largest_first_until_they_cover_the_init_peak_the_rest_keep_their_claims() -> (
    None
):
    pod = [init(600), app(200, 10), app(1000, 40)]
    groups = group_claims(pod)
    assert [g.members for g in groups] == [(0, 2), (1,)]
    assert limits(pod, groups) == {0: (600, 40), 1: (200, 10), 2: (1000, 40)}


def test_an_init_larger_than_all_apps_pools_them_held_to_their_sum_together() -> None:
    pod = [init(8000), app(1000, 20), app(2000, 30)]
    (group,) = group_claims(pod)
    assert (group.request.memory_mib, group.request.cores) == (8000, 50)
    assert limits(pod, [group]) == {0: (8000, 50), 1: (3000, 50), 2: (3000, 50)}


def test_a_whole_card_in_the_group_makes_the_claim_a_whole_card() -> None:
    pod = [init(None, 100), app(100, 10)]
    (group,) = group_claims(pod)
    assert group.request.whole_card_memory
    assert group.request.cores == 100
    assert group.own == (None, OwnShare(100, 10))


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param([init(500), app(100, count=2)], id="other-card-count"),
        pytest.param([init(500, priority=0), app(100, priority=1)], id="other-priority"),
        pytest.param([(share(500, 0), "sidecar"), app(100)], id="sidecar-runs-beside-the-apps"),
        pytest.param(
            [init(500), (GpuRequest(count=1, memory_percent=Decimal(50), cores=0), "app")],
            id="percentage-of-a-card",
        ),
    ],
)
def test_containers_that_cannot_share_keep_a_claim_of_their_own(pod: Pod) -> None:
    groups = group_claims(pod)
    assert [g.members for g in groups] == [(0,), (1,)]
    assert all(g.own == (None,) for g in groups)


SIZES = (None, 100, 300, 700)
CORES = (0, 10, 40, 100)


def pods() -> list[Pod]:
    """Every pod of up to 2 init and 3 app containers over a few memory and core shares."""
    shares = [(m, c) for m in SIZES for c in CORES]
    found = []
    for inits, apps in ((1, 1), (2, 1), (1, 2), (2, 2), (1, 3), (0, 2), (2, 0)):
        for picked in itertools.combinations_with_replacement(range(len(shares)), inits + apps):
            found.append(
                [init(*shares[i]) for i in picked[:inits]]
                + [app(*shares[i]) for i in picked[inits:]]
            )
    return found


def memory_on(card: int, request: GpuRequest) -> int:
    return card if request.memory_mib is None else request.memory_mib


def test_on_one_card_a_pod_books_what_hami_books_and_never_more_than_the_sum() -> None:
    card = 1_000_000  # a whole card's memory, larger than every share here
    for pod in pods():
        groups = group_claims(pod)
        inits = [memory_on(card, r) for r, kind in pod if kind == "init"]
        apps = [memory_on(card, r) for r, kind in pod if kind == "app"]
        init_cores = [r.cores for r, kind in pod if kind == "init"]
        app_cores = sum(r.cores for r, kind in pod if kind == "app")
        ours = sum(memory_on(card, g.request) for g in groups)
        assert ours <= sum(inits) + sum(apps), pod
        hami = max([*inits, sum(apps)])
        # where the pod fits one card under HAMi; but a whole-card init container takes one app
        # only (the card's size is unknown: several apps held together might not fit it)
        if hami <= card and app_cores <= 100 and not (card in inits and len(apps) > 1):
            assert ours == hami, pod
            assert sum(g.request.cores for g in groups) == max([*init_cores, app_cores]), pod


def test_no_container_is_held_below_what_it_asked_for() -> None:
    for pod in pods():
        groups = group_claims(pod)
        for index, (memory, cores) in limits(pod, groups).items():
            asked = pod[index][0]
            if asked.memory_mib is None:
                assert memory is None, pod
            else:
                assert memory is None or memory >= asked.memory_mib, pod
            assert cores == 0 or cores >= asked.cores, pod
        for group in groups:  # apps held together: their sum fits one card
            apps = [pod[i][0] for i in group.members if pod[i][1] == "app"]
            assert sum(r.cores for r in apps) <= 100 or len(apps) == 1, pod
            assert len(apps) <= 1 or all(r.memory_mib is not None for r in apps), pod


def translated_pod(spec: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}
    plan = translate({**obj, "spec": spec}, context=TranslationContext())
    return plan.apply_to({**obj, "spec": spec})["spec"], list(plan.templates)


def gpu(memory: int, cores: int | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": memory}
    if cores is not None:
        limits["nvidia.com/gpucores"] = cores
    return {"limits": limits}


def test_the_app_env_gets_its_own_share_after_what_the_user_set() -> None:
    spec = {
        "initContainers": [{"name": "warm", "image": "i", "resources": gpu(500, 50)}],
        "containers": [
            {
                "name": "main",
                "image": "i",
                "env": [{"name": "A", "value": "1"}],
                "resources": gpu(100, 10),
            }
        ],
    }
    patched, (template,) = translated_pod(spec)
    assert patched["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "VGPU_CONTAINER_MEMORY_LIMIT_0", "value": "100m"},
        {"name": "VGPU_CONTAINER_SM_LIMIT_0", "value": "10"},
    ]
    assert "env" not in patched["initContainers"][0]
    assert patched["resourceClaims"] == [
        {"name": "gpu-main", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    capacity = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]
    assert capacity["requests"]["memory"] == "500Mi"


def test_equal_shares_share_a_claim_without_any_env() -> None:
    spec = {
        "initContainers": [{"name": "warm", "image": "i", "resources": gpu(500)}],
        "containers": [{"name": "main", "image": "i", "resources": gpu(500)}],
    }
    patched, templates = translated_pod(spec)
    assert len(templates) == 1
    assert "env" not in patched["initContainers"][0]
    assert "env" not in patched["containers"][0]
