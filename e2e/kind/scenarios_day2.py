"""Day two on kind, the fast cases (issue 38; ``make e2e-kind`` runs this file after
``scenarios.py``, which uninstalls the chart: the first fixture installs it again). The full set
under a 20/s load, with figures, is ``make bench-day2`` (``bench/day2.py``); here only what a
design guarantees is asserted, never a time:

- a webhook rollout restart under a light load refuses no create (drain + maxUnavailable 0);
- creates resume after one webhook replica is SIGKILLed (no drain possible: the API server's
  calls to it fail until its endpoint goes, so no count is asserted, only that they resume);
- an agent restart keeps running shares' files and containers, a pod created meanwhile runs, and
  a claim prepared before the restart is unprepared by the new agent, leaving nothing;
- ``helm uninstall`` with a running and a just-deleted share leaves nothing of ours in the cluster
  or on the node, and the running pod gets a Warning Event; the chart installs again after.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench.day2_load import CREATED, Load, RawApi, counts, create_once, first_details
from e2e.cluster.settings import Settings
from e2e.kind import day2, releases
from e2e.kind.cluster import GPU_NODE_LABEL, NAMESPACE, RELEASE, Kind, install
from e2e.kind.steps import run
from e2e.waiting import wait_for
from vgpu_bridge.kube import KubeApi, KubeError

pytestmark = pytest.mark.e2e
Json = dict[str, Any]
PREVIOUS_ENV = "VGPU_BRIDGE_DAY2_PREVIOUS"
LIGHT_RATE = 5.0  # creates per second during the rollout


@pytest.fixture(scope="module")
def kind() -> Kind:
    return Kind.from_settings(Settings.from_env())


@pytest.fixture(scope="module")
def api(kind: Kind) -> KubeApi:
    return KubeApi.connect(str(kind.kubeconfig), timeout_s=30)


def install_tested(kind: Kind) -> None:
    """This tree's chart; with ``VGPU_BRIDGE_DAY2_PREVIOUS=1`` the previous release's chart
    and images (built from its commit, ``releases.py``), to see what these cases catch there."""
    if os.environ.get(PREVIOUS_ENV) != "1":
        install(kind)
        return
    release = releases.previous_release(kind.settings)
    releases.load_into_kind(kind.kind_binary, kind.name, release)
    day2.install_chart(kind, release.chart, *release.helm_values())


@pytest.fixture(scope="module", autouse=True)
def chart(kind: Kind, api: KubeApi) -> None:
    """scenarios.py ends with the chart uninstalled: install it again, both replicas Ready."""
    install_tested(kind)
    wait_for(
        lambda: day2.webhook_ready_endpoints(api) == 2,
        timeout_s=180,
        what="2 webhook endpoints",
        interval_s=1,
    )


@pytest.fixture(scope="module")
def workers(api: KubeApi) -> list[str]:
    nodes = api.list("/api/v1/nodes", labelSelector=GPU_NODE_LABEL)["items"]
    return sorted(n["metadata"]["name"] for n in nodes)


@pytest.fixture
def namespace(api: KubeApi) -> Iterator[str]:
    name = f"day2-{secrets.token_hex(3)}"
    api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    for item in api.list(f"/api/v1/namespaces/{name}/pods")["items"]:
        api.request(
            "DELETE",
            f"/api/v1/namespaces/{name}/pods/{item['metadata']['name']}",
            body={"gracePeriodSeconds": 0},
        )
    api.delete(f"/api/v1/namespaces/{name}")


def share(name: str, node: str) -> Json:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 10}
    container = {
        "name": "main",
        "image": "ubuntu:24.04",
        "imagePullPolicy": "Never",
        "command": ["sleep", "infinity"],
        "resources": {"limits": limits},
    }
    spec = {
        "terminationGracePeriodSeconds": 1,
        "containers": [container],
        "nodeSelector": {"kubernetes.io/hostname": node},
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create(api: KubeApi, namespace: str, body: Json) -> None:
    """Create (KubeApi retries a refused call a few times: the webhook is not what is tested)."""

    def created() -> bool:
        try:
            api.create(f"/api/v1/namespaces/{namespace}/pods", body)
        except KubeError as error:
            if error.status == 409:
                return True
            if error.status >= 500:
                return False
            raise
        return True

    wait_for(created, timeout_s=120, what=f"{body['metadata']['name']} admitted", interval_s=1)


def wait_running(api: KubeApi, namespace: str, name: str) -> Json:
    def found() -> Json | None:
        item: Json = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return item if item.get("status", {}).get("phase") == "Running" else None

    return wait_for(found, timeout_s=240, what=f"{name} Running", interval_s=1)


def gone(api: KubeApi, namespace: str, name: str) -> bool:
    try:
        api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    except KubeError as error:
        return error.status == 404
    return False


def pod_names(api: KubeApi, namespace: str) -> list[str]:
    return [
        i["metadata"]["name"] for i in api.list(f"/api/v1/namespaces/{namespace}/pods")["items"]
    ]


def claim_uids(api: KubeApi, namespace: str, name: str) -> list[str]:
    item = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return [
        str(
            api.get(
                f"{day2.RESOURCE}/namespaces/{namespace}/resourceclaims/{s['resourceClaimName']}"
            )["metadata"]["uid"]
        )
        for s in item.get("status", {}).get("resourceClaimStatuses") or []
    ]


def restart_count(api: KubeApi, namespace: str, name: str) -> int:
    item = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return sum(c["restartCount"] for c in item["status"]["containerStatuses"])


# --- the webhook -------------------------------------------------------------------------------


def test_a_webhook_rollout_restart_under_light_load_refuses_no_create(
    kind: Kind, api: KubeApi, namespace: str
) -> None:
    raw = RawApi(str(kind.kubeconfig))
    load = Load(lambda ns, name: create_once(raw, ns, name), [namespace], rate=LIGHT_RATE)
    load.start()
    try:
        time.sleep(2)
        deployment = f"deployment/{RELEASE}-webhook"
        run([*kind.kubectl, "-n", NAMESPACE, "rollout", "restart", deployment])
        run([*kind.kubectl, "-n", NAMESPACE, "rollout", "status", deployment, "--timeout=180s"])
        wait_for(  # the old replicas drain after the rollout is complete
            lambda: len(day2.pods(api, day2.WEBHOOK)) == 2,
            timeout_s=180,
            what="the old webhook replicas gone",
            interval_s=0.5,
        )
        time.sleep(2)
    finally:
        outcomes = load.stop()
    tally = counts(outcomes)
    assert tally[CREATED] > 0, tally
    assert sum(tally.values()) == tally[CREATED], (tally, first_details(outcomes))


def test_creates_resume_after_a_webhook_replica_is_sigkilled(kind: Kind, api: KubeApi) -> None:
    killed = day2.sigkill_one_webhook(api)
    raw = RawApi(str(kind.kubeconfig))
    namespace = "default"

    def admitted() -> bool:
        outcome, _ = create_once(raw, namespace, f"after-kill-{secrets.token_hex(3)}")
        return outcome == CREATED

    wait_for(admitted, timeout_s=60, what="a create admitted after the SIGKILL", interval_s=0.5)

    def restarted() -> bool:
        item = api.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{killed}")
        return day2.ready(item) and restart_count(api, NAMESPACE, killed) >= 1

    wait_for(restarted, timeout_s=120, what=f"{killed} restarted and Ready", interval_s=1)
    wait_for(
        lambda: day2.webhook_ready_endpoints(api) == 2,
        timeout_s=120,
        what="2 webhook endpoints",
        interval_s=1,
    )


# --- the agent ---------------------------------------------------------------------------------


def test_an_agent_restart_keeps_running_shares_runs_new_ones_and_unprepares_old_claims(
    api: KubeApi, namespace: str, workers: list[str]
) -> None:
    node = workers[0]
    create(api, namespace, share("before", node))
    wait_running(api, namespace, "before")
    uids = claim_uids(api, namespace, "before")
    files = {p: d for p, d in day2.share_file_hashes(node).items() if any(u in p for u in uids)}
    assert len(files) >= 2, files  # its CDI spec and its limits file
    old = day2.agent_on(api, node)
    assert old is not None
    api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{old['metadata']['name']}")
    create(api, namespace, share("during", node))
    wait_running(api, namespace, "during")
    day2.wait_agent_ready(api, node, not_uid=old["metadata"]["uid"])
    assert restart_count(api, namespace, "before") == 0
    now = day2.share_file_hashes(node)
    assert {p: now.get(p) for p in files} == files
    api.delete(f"/api/v1/namespaces/{namespace}/pods/before")
    wait_for(
        lambda: gone(api, namespace, "before"), timeout_s=180, what="before gone", interval_s=1
    )
    left = [
        p
        for p in [*day2.ours_on_node(node), *day2.share_file_hashes(node)]
        if any(u in p for u in uids)
    ]
    assert left == []


# --- uninstall, then install again (last: it removes the chart) --------------------------------


def test_uninstall_with_running_and_just_deleted_shares_leaves_nothing_then_installs_again(
    kind: Kind, api: KubeApi, namespace: str, workers: list[str]
) -> None:
    node = workers[0]
    for name in ("running", "deleted"):
        create(api, namespace, share(name, node))
        wait_running(api, namespace, name)
    api.delete(f"/api/v1/namespaces/{namespace}/pods/deleted")
    done = day2.uninstall(kind)
    assert done.returncode == 0, done.stderr

    def left() -> list[str]:
        """What of ours is left, but the running pod's own claim (it goes with the pod)."""
        kept = f"resourceclaims/{namespace}/running-"
        cluster = [x for x in day2.ours_in_cluster(api) if not x.startswith(kept)]
        pods = [f"pods/{namespace}/{name}" for name in pod_names(api, namespace)]
        return [*cluster, *[p for p in pods if p != f"pods/{namespace}/running"]] + [
            f"{node}:{path}" for path in day2.ours_on_node(node)
        ]

    try:
        wait_for(lambda: not left(), timeout_s=180, what="nothing of ours left", interval_s=2)
    except AssertionError:
        raise AssertionError(f"left: {left()}") from None
    events = api.list(f"/api/v1/namespaces/{namespace}/events")["items"]
    told = [
        e
        for e in events
        if e["involvedObject"].get("name") == "running" and e.get("type") == "Warning"
    ]
    assert told, [(e["involvedObject"].get("name"), e.get("reason")) for e in events]
    install_tested(kind)
    wait_for(
        lambda: day2.webhook_ready_endpoints(api) == 2,
        timeout_s=180,
        what="2 webhook endpoints",
        interval_s=1,
    )
    create(api, namespace, share("reinstalled", workers[1]))
    wait_running(api, namespace, "reinstalled")
