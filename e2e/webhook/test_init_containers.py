"""Init containers through the webhook on the real control plane: a pod whose init container
asks for 60 GiB and whose app asks for 30 GiB comes out with one claim for both, booked for the
peak as HAMi books it (a claim each booked 90 GiB), and kube-scheduler places it on an 80 GiB
card of the node agents."""

from __future__ import annotations

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.dra_objects import quantity
from e2e.pods import claim_of, only_result, running_pod
from e2e.webhook.helpers import create_pod, templates

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
IMAGE = "registry.invalid/e2e/no-image:never-pulled"


def container(name: str, memory_mib: int) -> Json:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": memory_mib}
    return {"name": name, "image": IMAGE, "resources": {"limits": limits}}


def test_init_60gi_and_app_30gi_share_one_claim_booked_as_60gi(kube: KubeClient, ns: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "convert-then-serve"},
        "spec": {
            "initContainers": [container("convert", 61440)],
            "containers": [container("serve", 30720)],
            "terminationGracePeriodSeconds": 0,
        },
    }
    created = create_pod(kube, ns, pod)
    [template] = templates(kube, ns)
    assert created["spec"]["resourceClaims"] == [
        {"name": "gpu-serve", "resourceClaimTemplateName": template}
    ]
    init, app = created["spec"]["initContainers"][0], created["spec"]["containers"][0]
    assert init["resources"]["claims"] == app["resources"]["claims"] == [{"name": "gpu-serve"}]
    assert app["env"] == [{"name": "VGPU_CONTAINER_MEMORY_LIMIT_0", "value": "30720m"}]
    assert "env" not in init

    running = running_pod(kube, ns, "convert-then-serve")
    result = only_result(claim_of(kube, ns, running))
    assert quantity(result["consumedCapacity"]["memory"]) == quantity("60Gi")
