"""`kubectl vgpu status` reads its lists in pages of 500 (issue 26's reduced run): a count, not a
time. A fleet of 200 GPUs (25 fake nodes with our agent's slices) and 1,200 allocated claims of
our driver in 5 namespaces is made on the session's cluster (``bench/scaling/fleet.py``, the
benchmark's own), the view is run as the ``kubectl-vgpu`` plugin, and the LIST requests it made
are read from the API server's ``apiserver_request_total``. A view that read the claims in one
unpaged list would make one LIST where ceil(n/500) are expected.

The counter does not say who asked, and in this session the kubelet stand-in lists every pod five
times a second and the node agents list their slices: only claim lists, which nothing else makes
meanwhile, and pod lists in the fleet's own namespace are counted exactly. With the webhook
behind a Service (``e2e/webhook/service_proxy.py``), ``-n`` reads the cards' bookings from its
/bookings and lists no claim outside its namespace. Everything made is deleted after the module
(claims, namespaces, slices, nodes).
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.scaling.fleet import Fleet, Layout
from bench.scaling.replica_start import running_replica
from bench.scaling.viewer import pages, plugin_command, run_viewer
from e2e.cluster import KubeClient, LocalCluster
from e2e.waiting import wait_for
from e2e.webhook.service_proxy import behind_service

pytestmark = pytest.mark.e2e

GPUS, CLAIMS, NAMESPACES, SMALL_CLAIMS = 200, 1_200, 5, 100
RESOURCE = "/apis/resource.k8s.io/v1"
Json = dict[str, Any]


@pytest.fixture(scope="module")
def fleet(kube: KubeClient) -> Iterator[Fleet]:
    tag = f"scale-{secrets.token_hex(3)}"
    layout = Layout(
        node_prefix=f"{tag}-node-",
        namespace_prefix=f"{tag}-ns-",
        claim_prefix=f"{tag}-claim-",
        small_namespace=f"{tag}-small",
        namespaces=NAMESPACES,
        small_claims=SMALL_CLAIMS,
        claims_per_gpu=CLAIMS / GPUS,
    )
    made = Fleet(kube, layout, with_device_class=False)  # the class belongs to other fixtures
    try:
        made.grow(gpus=GPUS, claims=CLAIMS)
        # earlier modules' namespaces still being deleted: the namespace controller's LISTs in
        # them are counted as the view's
        wait_for(lambda: not kube.terminating_namespaces(), timeout_s=120,
                 what="earlier tests' namespaces gone")  # fmt: skip
        yield made
    finally:
        made.remove()


def every_claim(kube: KubeClient) -> int:
    """Claims in the cluster now: what `-A` and the bookings of `-n` read."""
    return len(kube.items(f"{RESOURCE}/resourceclaims"))


def test_status_all_namespaces_reads_every_claim_in_pages_of_500(
    kube: KubeClient, e2e_cluster: LocalCluster, fleet: Fleet
) -> None:
    claims = every_claim(kube)
    assert claims >= CLAIMS
    run = run_viewer(kube, e2e_cluster.kubeconfig, ["-A"], claim_prefix=fleet.layout.claim_prefix)
    assert run.shares_shown == CLAIMS  # every page made it into the view
    assert run.requests.lists("resourceclaims", scope="cluster") == pages(claims) >= 3
    assert run.requests.lists("resourceclaims", scope="namespace") == 0


def test_status_of_one_namespace_reads_its_claims_once_and_every_claim_in_pages(
    kube: KubeClient, e2e_cluster: LocalCluster, fleet: Fleet
) -> None:
    claims = every_claim(kube)
    scope = ["-n", fleet.layout.small_namespace]
    run = run_viewer(kube, e2e_cluster.kubeconfig, scope, claim_prefix=fleet.layout.claim_prefix)
    assert run.shares_shown == SMALL_CLAIMS
    assert run.requests.lists("resourceclaims", scope="namespace") == 1
    assert run.requests.lists("pods", scope="namespace") == 1
    # the cards' bookings count the whole cluster's claims: paged as well
    assert run.requests.lists("resourceclaims", scope="cluster") == pages(claims) >= 3


def status_document(kubeconfig: Path, scope: list[str]) -> Json:
    """The view as JSON, run as the plugin."""
    command = [*plugin_command(), "status", *scope, "-o", "json", "--kubeconfig", str(kubeconfig)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    document: Json = json.loads(done.stdout)
    return document


def but_the_agents(notes: list[str]) -> list[str]:
    return [note for note in notes if not note.startswith("the agents' metrics")]


def bookings_shown(document: Json) -> list[tuple[str, str, int, int, int]]:
    return [(c["node"], c["device"], c["bookedMemory"], c["bookedCores"], c["freeMemory"])
            for c in document["cards"]]  # fmt: skip


def test_status_of_one_namespace_reads_the_cards_bookings_from_the_webhook_not_every_claim(
    kube: KubeClient, e2e_cluster: LocalCluster, fleet: Fleet, tmp_path: Path
) -> None:
    """With the webhook behind its Service (the chart's labels), `-n` reads every card's booking
    from its /bookings through the API server's service proxy: no LIST of every claim, and the
    same BOOKED and FREE as when it lists them."""
    scope = ["-n", fleet.layout.small_namespace]
    listed = status_document(e2e_cluster.kubeconfig, scope)
    assert any(card["bookedMemory"] for card in listed["cards"])
    workdir = tmp_path / "webhook"
    with (
        running_replica(e2e_cluster.kubeconfig, workdir, listen_host="0.0.0.0") as (_, hook, _),
        behind_service(
            kube,
            port=hook.port,
            namespace=f"{fleet.layout.small_namespace}-hook",
            node=fleet.layout.node(0),
        ),  # fmt: skip
    ):
        run = run_viewer(kube, e2e_cluster.kubeconfig, scope,
                         claim_prefix=fleet.layout.claim_prefix)  # fmt: skip
        served = status_document(e2e_cluster.kubeconfig, scope)
    assert run.shares_shown == SMALL_CLAIMS
    assert run.requests.lists("resourceclaims", scope="namespace") == 1
    assert run.requests.lists("resourceclaims", scope="cluster") == 0
    assert bookings_shown(served) == bookings_shown(listed)
    # the agents' namespace is known only while a configuration of ours names a Service
    assert but_the_agents(served["notes"]) == but_the_agents(listed["notes"])
