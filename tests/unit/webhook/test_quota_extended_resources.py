"""Whole cards asked for as an extended resource count against the namespace's GPU quota (issue 35,
item 4). With our DeviceClass's `extendedResourceName` (`--extended-resource-name`, the chart's
`deviceClass.extendedResourceName`; Kubernetes >= 1.37) kube-scheduler gives a pod no webhook
translated whole cards of our class for `nvidia.com/gpu: N`, and for the implicit
`deviceclass.resource.kubernetes.io/<class>` whatever the setting. Such a pod (opted out with
`vgpu-bridge.io/ignore`, or asking only the implicit name) skipped the quota gate, so a tenant
filled the quota with shares and then added as many whole cards again. Now its request counts at
admission as that many whole cards (memory as the largest card); once bound, its claim counts
through the watch instead, and the pod is never counted again: one quota, counted once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over, pod_response
from tests.unit.webhook.test_quotas import CLAIMS, held, message, namespace_holds, pod, quota
from vgpu_bridge.core import DEFAULT, Inventory, TranslatorConfig
from vgpu_bridge.core.booking import Booking, extended_resource_sizing
from vgpu_bridge.core.dialects import hami
from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.quotas import QuotaCache, QuotaGate
from vgpu_bridge.webhook.settings import Settings

GiB = 1 << 30
EXTENDED = "nvidia.com/gpu"
IMPLICIT = f"deviceclass.resource.kubernetes.io/{DEFAULT.device_class}"
CARDS = Inventory({DEFAULT.driver: frozenset({40 * GiB, 80 * GiB})})
OPTED_OUT = {"labels": {"vgpu-bridge.io/ignore": "true"}}


def admitter(recorded: RecordingApi, *, extended: tuple[str, ...] = (EXTENDED,)) -> Admitter:
    gate = QuotaGate(api=recorded.api, cache=QuotaCache(recorded.api, names=hami.RESOURCES),
                     profile=DEFAULT, names=hami.RESOURCES, inventory=lambda: CARDS,
                     extended_names=extended)  # fmt: skip
    return admitter_over(recorded, config=TranslatorConfig(), quotas=gate, inventory=lambda: CARDS)


def whole_cards(resources: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """A pod as a device-plugin user writes it, opted out of translation unless `meta` says."""
    made = pod(resources)
    made["metadata"].update(meta if meta else OPTED_OUT)
    return made


def scheduler_claim(devices: int) -> dict[str, Any]:
    """The claim kube-scheduler made for a bound pod's `nvidia.com/gpu: devices`."""
    request = {"deviceClassName": DEFAULT.device_class, "allocationMode": "ExactCount",
               "count": devices}  # fmt: skip
    results = [{"request": "container-0-request-0", "driver": DEFAULT.driver, "pool": "node-a",
                "device": f"gpu-{i}", "consumedCapacity": {"memory": "80Gi", "cores": "100"}}
               for i in range(devices)]  # fmt: skip
    return {
        "metadata": {"name": "a-extended-resources-x1y2z",
                     "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"}},
        "spec": {"devices": {"requests": [{"name": "container-0-request-0", "exactly": request}]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }  # fmt: skip


def test_an_opted_out_whole_card_pod_counts_against_a_quota_filled_with_shares(
    recorded: RecordingApi,
) -> None:
    namespace_holds(recorded, [quota("cards", **{"requests.nvidia.com/gpu": "2"})],
                    [held(1, "1Gi", 10), held(1, "1Gi", 10)])  # fmt: skip
    response = pod_response(admitter(recorded), whole_cards({EXTENDED: 2}))
    assert message(response) == (
        "exceeded quota cards: requests.nvidia.com/gpu: requested 2, used 2, limited 2"
    )


def test_its_memory_counts_as_the_largest_card_and_its_cores_whole(
    recorded: RecordingApi,
) -> None:
    hard = {"limits.nvidia.com/gpumem": str(100 * 1024), "limits.nvidia.com/gpucores": "200"}
    namespace_holds(recorded, [quota("team", **hard)], [held(1, "20Gi", 50)])
    assert message(pod_response(admitter(recorded), whole_cards({EXTENDED: 2}))).split("; ") == [
        "exceeded quota team: limits.nvidia.com/gpucores: requested 200, used 50, limited 200",
        "exceeded quota team: limits.nvidia.com/gpumem: requested 163840, used 20480, "
        "limited 102400",
    ]


def test_once_bound_its_claim_counts_and_the_pod_is_not_counted_again(
    recorded: RecordingApi,
) -> None:
    """Pod a (2 cards) is bound: its claim holds 2 devices. Pod b of 2 fits a quota of 4 (a and
    its claim counted once: 2 + 2), b of 3 does not (used 2, not 4)."""
    namespace_holds(recorded, [quota("cards", **{"requests.nvidia.com/gpu": "4"})],
                    [scheduler_claim(2)])  # fmt: skip
    assert pod_response(admitter(recorded), whole_cards({EXTENDED: 2}))["allowed"] is True
    assert message(pod_response(admitter(recorded), whole_cards({EXTENDED: 3}))) == (
        "exceeded quota cards: requests.nvidia.com/gpu: requested 3, used 2, limited 4"
    )


def test_the_implicit_class_resource_counts_without_the_setting_and_off_the_quick_path(
    recorded: RecordingApi,
) -> None:
    namespace_holds(recorded, [quota("cards", **{"requests.nvidia.com/gpu": "1"})],
                    [held(1, "1Gi", 10)])  # fmt: skip
    plain = whole_cards({IMPLICIT: 1}, name="p")  # no label, no key the translator reads
    gate = admitter(recorded, extended=())
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "operation": "CREATE", "namespace": "team-a", "object": plain}}  # fmt: skip
    assert gate.quick_review_body(json.dumps(body).encode()) is None  # it reads the quota
    assert message(pod_response(gate, plain)) == (
        "exceeded quota cards: requests.nvidia.com/gpu: requested 1, used 1, limited 1"
    )


def test_without_the_setting_an_opted_out_pods_gpus_are_another_drivers(
    recorded: RecordingApi,
) -> None:
    """`nvidia.com/gpu` not served by our class (a device plugin's, on other nodes): counted by
    Kubernetes' own quota, not by ours."""
    namespace_holds(recorded, [quota("cards", **{"requests.nvidia.com/gpu": "1"})],
                    [held(1, "1Gi", 10)])  # fmt: skip
    response = pod_response(admitter(recorded, extended=()), whole_cards({EXTENDED: 2}))
    assert response["allowed"] is True
    assert CLAIMS not in [c.path for c in recorded.calls]


def test_a_dry_run_is_not_counted(recorded: RecordingApi) -> None:
    namespace_holds(recorded, [quota("cards", **{"requests.nvidia.com/gpu": "1"})],
                    [held(1, "1Gi", 10)])  # fmt: skip
    response = pod_response(admitter(recorded), whole_cards({EXTENDED: 2}), dry_run=True)
    assert response["allowed"] is True


def containers(*asked: int, restart: str | None = None) -> list[dict[str, Any]]:
    made = [{"name": f"c{i}", "resources": {"limits": {EXTENDED: n}}} for i, n in enumerate(asked)]
    return [{**c, "restartPolicy": restart} if restart else c for c in made]


@pytest.mark.parametrize(
    ("spec", "devices"),
    [
        pytest.param({"containers": containers(1, 2)}, 3, id="app-containers-summed"),
        pytest.param(
            {"containers": containers(1), "initContainers": containers(3, 2)},
            3,
            id="a-bigger-init-container-takes-more",
        ),
        pytest.param(
            {"containers": containers(2), "initContainers": containers(1)},
            2,
            id="an-init-container-reuses-the-app-cards",
        ),
        pytest.param(
            {"containers": containers(1), "initContainers": containers(2, restart="Always")},
            3,
            id="sidecars-are-long-lived",
        ),
        pytest.param(
            {
                "containers": [
                    {
                        "name": "c",
                        "resources": {"requests": {EXTENDED: "2"}, "limits": {EXTENDED: "2"}},
                    }
                ]
            },
            2,
            id="requests-read-first",
        ),
        pytest.param({"containers": containers(0)}, 0, id="zero-asks-nothing"),
        pytest.param(
            {"containers": [{"name": "c", "resources": {"limits": {EXTENDED: "x"}}}]},
            1,
            id="no-quantity-counts-one",
        ),
        pytest.param({"containers": "garbage"}, 0, id="garbage-asks-nothing"),
    ],
)
def test_the_cards_counted_are_those_the_scheduler_claims(
    spec: dict[str, Any], devices: int
) -> None:
    sizing = extended_resource_sizing({"spec": spec}, (EXTENDED, IMPLICIT))
    assert sizing.booking(80 * GiB) == Booking(devices, devices * 80 * GiB, devices * 100)


def settings(extended: str) -> Settings:
    return Settings(listen="127.0.0.1:0", tls_cert_file="c", tls_key_file="k",
                    extended_resource_name=extended)  # fmt: skip


def test_the_setting_takes_an_extended_resource_name_or_nothing() -> None:
    assert settings("").extended_resource_names() == ()
    assert settings(EXTENDED).extended_resource_names() == (EXTENDED,)
    with pytest.raises(SettingsError, match="extended_resource_name"):
        settings("gpu")
