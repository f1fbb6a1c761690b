"""Init containers book the peak, not the sum, decided by the real kube-scheduler.

HAMi books a pod's init containers and app containers on a card as the larger of the two (they
never run together): init 60 GiB + app 30 GiB fits an 80 GiB card. Translated by core, the init
container and the app share one claim booked for 60 GiB; the node publishes what the agent
publishes (`node.slices.build_slices`: one 80 GiB card, under a driver name of this test's own).
With a claim each, the two would ask for 90 GiB of the card and never be scheduled.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.dra_objects import device_class, quantity
from e2e.pods import (
    RESOURCE,
    claim_of,
    is_unbound,
    only_result,
    running_pod,
    unschedulable_condition,
)
from e2e.waiting import stays, wait_for
from vgpu_bridge.core import DriverProfile, TranslationContext, translate
from vgpu_bridge.core.profiles import our_profile
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.slices import build_slices

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
IMAGE = "registry.invalid/e2e/no-image:never-pulled"


@pytest.fixture
def card(kube: KubeClient, fake_nodes: list[str]) -> Iterator[DriverProfile]:
    """One 80 GiB card of ours on the first fake node; the profile names its driver."""
    profile = our_profile(f"gpu-{secrets.token_hex(3)}.e2e.vgpu-bridge.io")
    kube.create(
        f"{RESOURCE}/deviceclasses", device_class(profile.device_class, driver=profile.driver)
    )
    gpus = [Gpu(0, "GPU-init-peak-0", "NVIDIA H100 80GB HBM3", 80 * 2**30)]
    slices = build_slices(gpus, node=fake_nodes[0], profile=profile, generation=1)
    for piece in slices:
        kube.create(f"{RESOURCE}/resourceslices", piece)
    yield profile
    for piece in slices:
        kube.delete(f"{RESOURCE}/resourceslices/{piece['metadata']['name']}")
    kube.delete(f"{RESOURCE}/deviceclasses/{profile.device_class}")


def gpu(memory_mib: int) -> Json:
    return {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": memory_mib}}


def create_translated(kube: KubeClient, namespace: str, pod: Json, profile: DriverProfile) -> None:
    """Create the pod's templates and the pod, as the webhook does."""
    pod = {"apiVersion": "v1", "kind": "Pod", **pod}
    plan = translate(pod, context=TranslationContext(profile=profile))
    for template in plan.templates:
        kube.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates", template)
    kube.create(f"/api/v1/namespaces/{namespace}/pods", plan.apply_to(pod))


def test_init_60gi_and_app_30gi_run_on_one_80gi_card_booked_as_60gi(
    kube: KubeClient, namespace: str, card: DriverProfile
) -> None:
    convert_then_serve = {
        "metadata": {"name": "convert-then-serve", "namespace": namespace},
        "spec": {
            "initContainers": [{"name": "convert", "image": IMAGE, "resources": gpu(61440)}],
            "containers": [{"name": "serve", "image": IMAGE, "resources": gpu(30720)}],
        },
    }
    create_translated(kube, namespace, convert_then_serve, card)
    pod = running_pod(kube, namespace, "convert-then-serve")
    result = only_result(claim_of(kube, namespace, pod))
    assert quantity(result["consumedCapacity"]["memory"]) == 60 * 2**30
    serve = pod["spec"]["containers"][0]
    assert {"name": "VGPU_CONTAINER_MEMORY_LIMIT_0", "value": "30720m"} in serve["env"]

    # 20 GiB are left on the card: a 21 GiB share waits
    one_more = {
        "metadata": {"name": "one-more", "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": IMAGE, "resources": gpu(21504)}]},
    }
    create_translated(kube, namespace, one_more, card)
    wait_for(
        lambda: unschedulable_condition(kube, namespace, "one-more"),
        what="one-more marked Unschedulable",
    )
    stays(lambda: is_unbound(kube, namespace, "one-more"), for_s=3, what="one-more unbound")
