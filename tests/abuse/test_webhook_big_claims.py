"""Big ResourceClaims of our class at the claim watch's first list (issue 35, item 2), against the
real webhook process: one namespace holds 300 claims of 1.26 MiB each (32 requests of our class
with no memory request, each with 4 CEL selectors of 10 KiB: within the API's limits). Every
replica lists every claim at start, so a replica that kept them whole ran out of memory and all
crash-looped together. What must hold: the replica follows the claims with its memory bounded,
and another namespace's GPU pod still gets the right quota answer from the watch's sums."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.abuse.fake_api import FakeApi, fake_api
from tests.abuse.hostile import gpu_pod, review
from tests.abuse.processes import proc_status, rss_mb, tail, wait_until
from tests.abuse.webhook_client import Webhook, running_webhook
from vgpu_bridge.core import DEFAULT

BIG_CLAIMS = 300
REQUESTS_PER_CLAIM = 32
SELECTORS_PER_REQUEST = 4
SELECTOR_BYTES = 10 * 1024
HOSTILE, NEIGHBOUR = "hostile", "team-a"
#: generous: the replica reads 378 MB of claims; a replica that keeps them whole passes 800 MB
MAX_PEAK_RSS_MB = 300


def big_claim_template() -> bytes:
    """One big claim, its name a fixed-width placeholder (each copy differs only there)."""
    expression = (
        f'device.attributes["{DEFAULT.driver}"].productName.contains("{"x" * SELECTOR_BYTES}")'
    )
    selectors = [{"cel": {"expression": expression}} for _ in range(SELECTORS_PER_REQUEST)]
    exactly = {"deviceClassName": DEFAULT.device_class, "count": 1, "selectors": selectors}
    requests = [{"name": f"r{i}", "exactly": exactly} for i in range(REQUESTS_PER_CLAIM)]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "big-NNNN", "namespace": HOSTILE, "resourceVersion": "1"},
        "spec": {"devices": {"requests": requests}},
    }
    return json.dumps(claim).encode()


def neighbour_claim() -> bytes:
    """The neighbour's one allocated card."""
    result = {"request": "gpu", "driver": DEFAULT.driver, "pool": "node-80", "device": "gpu-0",
              "consumedCapacity": {"memory": "80Gi", "cores": "100"}}  # fmt: skip
    request = {"name": "gpu", "exactly": {"deviceClassName": DEFAULT.device_class, "count": 1}}
    claim = {
        "metadata": {"name": "held", "namespace": NEIGHBOUR, "resourceVersion": "1"},
        "spec": {"devices": {"requests": [request]}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }
    return json.dumps(claim).encode()


def serve_claims(namespace: str | None) -> Iterator[bytes]:
    if namespace in (None, NEIGHBOUR):
        yield neighbour_claim()
    if namespace in (None, HOSTILE):
        template = big_claim_template()
        yield from (template.replace(b"NNNN", b"%04d" % i) for i in range(BIG_CLAIMS))


def serve_quotas(namespace: str | None) -> Iterator[bytes]:
    if namespace in (None, NEIGHBOUR):
        quota = {"metadata": {"name": "team-gpu", "namespace": NEIGHBOUR},
                 "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}  # fmt: skip
        yield json.dumps(quota).encode()


@pytest.fixture(scope="module")
def big_claims_api() -> Iterator[FakeApi]:
    with fake_api() as api:
        api.served.update(resourceclaims=serve_claims, resourcequotas=serve_quotas)
        yield api


@pytest.fixture(scope="module")
def followed(
    tmp_path_factory: pytest.TempPathFactory, big_claims_api: FakeApi
) -> Iterator[Webhook]:
    """The webhook once its claim watch has listed every claim (GET /bookings answers then)."""
    with running_webhook(tmp_path_factory.mktemp("big-claims"), big_claims_api) as webhook:
        wait_until(lambda: webhook.get("/bookings")[0] == 200, webhook.process,
                   webhook.log_file, "the claim watch's first list")  # fmt: skip
        yield webhook


def admitted(webhook: Webhook, gpus: int) -> dict[str, Any]:
    """The answer to a (not dry-run) GPU pod of `gpus` whole cards in the neighbour's namespace."""
    body = review(gpu_pod({"nvidia.com/gpu": gpus}), namespace=NEIGHBOUR, dryRun=False)
    return webhook.admit(body)


def test_big_unsized_claims_at_the_first_list_keep_the_replica_small(followed: Webhook) -> None:
    peak_mb = proc_status(followed.process.pid, "VmHWM") / 1024
    print(f"\nwebhook with {BIG_CLAIMS} claims of 1.26 MiB: peak {peak_mb:.0f} MB, "
          f"now {rss_mb(followed.process.pid):.0f} MB")  # fmt: skip
    assert peak_mb < MAX_PEAK_RSS_MB, tail(followed.log_file)
    assert followed.process.poll() is None


def test_another_namespace_still_gets_the_right_quota_answer(
    followed: Webhook, big_claims_api: FakeApi
) -> None:
    asked_before = len(big_claims_api.requests)
    one = admitted(followed, 1)
    two = admitted(followed, 2)
    assert one["allowed"] is True, one
    assert two["allowed"] is False
    assert (
        "exceeded quota team-gpu: requests.nvidia.com/gpu: requested 2, used 1, limited 2"
        in two["status"]["message"]
    ), two
    with big_claims_api.lock:
        asked = [target for _, target in big_claims_api.requests[asked_before:]]
    assert not [t for t in asked if "/resourceclaims?" in t or t.endswith("/resourceclaims")]


def test_the_webhook_logs_no_traceback(followed: Webhook, tmp_path: Path) -> None:
    assert "Traceback" not in followed.log_file.read_text(errors="replace")
