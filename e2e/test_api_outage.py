"""An API server outage on a control plane of this module's own (issue 38, scenario 3, the fast
version; the 30 s one under load is bench/day2.py's): kube-apiserver killed for a few seconds and
started again with the same flags, port and certificates, or stopped (SIGSTOP) and continued.

The webhook stays ready throughout (its readiness does not follow the API once it has listed:
all replicas unready would leave the API server, once back, no endpoint to call), every cache it
follows says it follows again after the return, and a pod at the edge of a namespace's GPU quota
right after the return is refused or admitted exactly as a fresh list of the claims says. The
node agent stays alive and healthy while the API server is down, and a card's taint set while it
was down is published after its return (with a resync period of an hour: only the retry after
the failed publication can do it). The time from the return to each cache following again and
to the taint's publication is printed.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import pytest

from e2e.cluster import KubeClient, LocalCluster, Settings, ensure_binary, start_cluster
from e2e.cluster.client import ApiError, Json
from e2e.cluster.nodes import create_fake_nodes
from e2e.dra_objects import device_class
from e2e.node.agent import AgentProcess, running_agent
from e2e.waiting import wait_for
from e2e.webhook.helpers import create_pod, gpu_pod, serve_namespace
from e2e.webhook.process import WebhookProcess, running_webhook
from vgpu_bridge.core import DEFAULT

pytestmark = pytest.mark.e2e
RESOURCE = "/apis/resource.k8s.io/v1"
LABEL = "e2e.vgpu-bridge.io/outage"
DOWN_S = 4.0
T = TypeVar("T")
#: the caches the webhook follows (webhook/app.py api_workers), as their logs name them
CACHES = ("inventory", "resource quota", "resource claim", "unbound pod", "template")
CARDS = [
    {"uuid": "GPU-outage-0", "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"},
    {"uuid": "GPU-outage-1", "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"},
]


@pytest.fixture(scope="module")
def cluster(e2e_settings: Settings) -> Iterator[LocalCluster]:
    """A control plane of this module's own: restarting the session's would disturb the
    session's other tests. Its state directory is where the session's is, named after this
    process, so a later session removes it if this one is killed (`session.sweep_stale`)."""
    binary = ensure_binary(e2e_settings).binary
    sessions = e2e_settings.cache_root / "state" / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    state_dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-outage-", dir=sessions))
    started = start_cluster(
        binary, e2e_settings.k8s_version, state_dir=state_dir, die_with_parent=True
    )
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster) -> KubeClient:
    return cluster.client()


@pytest.fixture(scope="module")
def node(kube: KubeClient) -> str:
    [name] = create_fake_nodes(kube, 1)
    return name


@pytest.fixture(scope="module")
def agent(kube: KubeClient, cluster: LocalCluster, node: str) -> Iterator[AgentProcess]:
    """Our node agent with a resync period of an hour: after its first publication only the
    retry of a failed one (or a taint's change) writes its slices."""
    kube.create(
        f"{RESOURCE}/deviceclasses", device_class(DEFAULT.device_class, driver=DEFAULT.driver)
    )
    settings = {"VGPU_BRIDGE_RESYNC_SECONDS": "3600", "VGPU_BRIDGE_DEVICE_HEALTH_SECONDS": "1"}
    with running_agent(node, cluster.kubeconfig, CARDS, extra_env=settings) as running:
        wait_for(lambda: len(devices(kube, node)) == len(CARDS), timeout_s=60,
                 what="the agent's slices")  # fmt: skip
        yield running


@pytest.fixture(scope="module")
def webhook(
    kube: KubeClient,
    cluster: LocalCluster,
    agent: AgentProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookProcess]:
    workdir = tmp_path_factory.mktemp("outage-webhook")
    with running_webhook(kube, cluster.kubeconfig, workdir, grace_s=None,
                         namespace_label=LABEL) as process:  # fmt: skip
        yield process
        print(process.log()[-6000:])  # shown by pytest for failed tests


@pytest.fixture
def ns(kube: KubeClient, webhook: WebhookProcess) -> Iterator[str]:
    name = f"outage-{secrets.token_hex(3)}"
    kube.create("/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})  # fmt: skip
    serve_namespace(kube, name, LABEL)
    yield name
    kube.delete(f"/api/v1/namespaces/{name}")


def devices(kube: KubeClient, node: str) -> dict[str, Json]:
    selector = f"spec.nodeName={node},spec.driver={DEFAULT.driver}"
    slices = kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector)
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def agent_healthz(agent: AgentProcess) -> tuple[int, str]:
    url = f"http://127.0.0.1:{agent.metrics_port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def one_card(name: str) -> Json:
    """A claim written by hand: one device of our class, no pod uses it yet."""
    request = {"name": "gpu", "exactly": {"deviceClassName": DEFAULT.device_class, "count": 1}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name}, "spec": {"devices": {"requests": [request]}}}  # fmt: skip


def cards_claimed(kube: KubeClient, ns: str) -> int:
    """Devices of our class the namespace's claims ask for, from a fresh list."""
    return sum(
        r["exactly"]["count"]
        for claim in kube.items(f"{RESOURCE}/namespaces/{ns}/resourceclaims")
        for r in claim["spec"]["devices"]["requests"]
        if r.get("exactly", {}).get("deviceClassName") == DEFAULT.device_class
    )


def admitted(kube: KubeClient, ns: str, name: str) -> bool:
    """Whether a pod asking one card is admitted (False: refused by the quota)."""
    try:
        create_pod(kube, ns, gpu_pod(name, {"nvidia.com/gpu": 1}))
    except ApiError as error:
        refused = error
    else:
        return True
    assert refused.status == 403, refused
    assert "exceeded quota" in refused.body, refused
    return False


def quota_decisions_agree_with_a_fresh_list(kube: KubeClient, ns: str, *, hard: int) -> None:
    """At the edge (the claims fill the quota) a pod is refused, one claim fewer it is admitted:
    each decision as `hard` and a fresh list of the claims say."""
    assert cards_claimed(kube, ns) == hard
    assert admitted(kube, ns, "at-the-edge") is False
    kube.delete(f"{RESOURCE}/namespaces/{ns}/resourceclaims/filler-0")
    assert cards_claimed(kube, ns) == hard - 1
    assert admitted(kube, ns, "one-below") is True


def following_again(webhook: WebhookProcess, *, after: int) -> dict[str, float]:
    """The caches that logged following the API again since log offset `after`: when each first
    did (seconds since the epoch)."""
    found: dict[str, float] = {}
    for line in webhook.log()[after:].splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        for what in CACHES:
            if entry.get("event") == f"{what} watch follows again" and what not in found:
                found[what] = datetime.fromisoformat(entry["timestamp"]).timestamp()
    return found


def every_cache_following_again(webhook: WebhookProcess, *, after: int) -> dict[str, float] | None:
    found = following_again(webhook, after=after)
    return found if len(found) == len(CACHES) else None


def quota_with_one_claim(kube: KubeClient, ns: str, *, hard: int) -> None:
    """A quota of `hard` cards in `ns`, one of them already claimed."""
    kube.create(f"/api/v1/namespaces/{ns}/resourcequotas",
                {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus"},
                 "spec": {"hard": {"limits.nvidia.com/gpu": str(hard)}}})  # fmt: skip
    kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", one_card("before"))


def test_the_webhook_stays_ready_and_decides_quotas_from_fresh_counts_after_a_restart(
    kube: KubeClient, cluster: LocalCluster, webhook: WebhookProcess, ns: str
) -> None:
    hard = 2
    quota_with_one_claim(kube, ns, hard=hard)
    log_offset = len(webhook.log())
    ready_while_down: list[bool] = []

    def while_down() -> None:
        for _ in range(3):
            ready_while_down.append(webhook.ready())
            time.sleep(0.5)

    cluster.restart_apiserver(down_s=DOWN_S, while_down=while_down)
    back_at = time.time()  # its /readyz answers again
    # right after the return: claims made while the caches may still be relisting
    for index in range(hard - 1):
        kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", one_card(f"filler-{index}"))
    quota_decisions_agree_with_a_fresh_list(kube, ns, hard=hard)
    assert ready_while_down == [True] * 3
    assert webhook.ready()

    followed = wait_for(
        lambda: every_cache_following_again(webhook, after=log_offset),
        timeout_s=90,
        what="every webhook cache to follow the API again",
    )
    since = {what: round(at - back_at, 1) for what, at in followed.items()}
    print(f"each webhook cache follows again, s after the API server's /readyz: {since}")


def test_the_webhook_decides_quotas_from_fresh_counts_after_the_api_server_hung(
    kube: KubeClient, cluster: LocalCluster, webhook: WebhookProcess, ns: str
) -> None:
    hard = 2
    quota_with_one_claim(kube, ns, hard=hard)
    with cluster.apiserver_paused():
        ready_while_hung = [webhook.ready() for _ in range(3)]
        time.sleep(DOWN_S)
    for index in range(hard - 1):
        kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", one_card(f"filler-{index}"))
    quota_decisions_agree_with_a_fresh_list(kube, ns, hard=hard)
    assert ready_while_hung == [True] * 3


ROUNDS = 3


def full_namespaces(kube: KubeClient, count: int) -> list[str]:
    """`count` served namespaces, each with a quota of one card that a claim fills: a pod asking
    one card is refused there until the quota is raised."""
    made = []
    for _ in range(count):
        name = f"outage-raise-{secrets.token_hex(3)}"
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        kube.create("/api/v1/namespaces", namespace)
        serve_namespace(kube, name, LABEL)
        kube.create(f"/api/v1/namespaces/{name}/resourcequotas",
                    {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus"},
                     "spec": {"hard": {"limits.nvidia.com/gpu": "1"}}})  # fmt: skip
        kube.create(f"{RESOURCE}/namespaces/{name}/resourceclaims", one_card("before"))
        made.append(name)
    return made


def as_soon_as_it_answers(call: Callable[[], T]) -> T:
    """`call`'s result once the API server takes it: refused connections and the errors of a
    server still starting (5xx, 429, a webhook it cannot call yet) are tried again at once."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except (OSError, ApiError) as error:
            if isinstance(error, ApiError) and error.status < 429 and error.status != 403:
                raise
            if isinstance(error, ApiError) and "exceeded quota" in error.body:
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def raise_the_quota_then_ask_one_card(kube: KubeClient, ns: str, decided: list[bool]) -> None:
    """The quota of `ns` raised from one card to two (the claim fills one) as soon as the API
    server takes a write again, not waiting for its /readyz, then a pod asking one card as soon
    as it can be decided: `decided` gets True when admitted, as a fresh list says it must be."""
    path = f"/api/v1/namespaces/{ns}/resourcequotas/gpus"
    raised = {"spec": {"hard": {"limits.nvidia.com/gpu": "2"}}}
    as_soon_as_it_answers(lambda: kube.patch(path, raised))
    pod = gpu_pod("after-the-raise", {"nvidia.com/gpu": 1})
    try:
        as_soon_as_it_answers(lambda: create_pod(kube, ns, pod))
    except ApiError as error:
        if "exceeded quota" not in error.body:
            raise
        decided.append(False)
    else:
        decided.append(True)


def test_a_quota_raised_right_after_the_api_server_returns_is_seen_by_the_next_decision(
    kube: KubeClient, cluster: LocalCluster, webhook: WebhookProcess
) -> None:
    """Issue 38 (found on kind): a replica answering right after the return decided on the quota
    its cache held before the raise: its relist was read, and its watch was refused (429: the
    restarted server's watch cache initializing) and retried quietly after each Retry-After.
    Each round: restart, and as soon as the server takes writes raise the quota and ask one
    card; then the same once the server was paused (SIGSTOP)."""
    namespaces = full_namespaces(kube, ROUNDS + 1)
    try:
        for ns in namespaces:  # the caches hold each full quota before the outage
            assert admitted(kube, ns, "at-the-edge") is False
        decided: list[bool] = []
        for ns in namespaces[:ROUNDS]:
            raising = threading.Thread(target=raise_the_quota_then_ask_one_card,
                                       args=(kube, ns, decided), daemon=True)  # fmt: skip
            cluster.restart_apiserver(down_s=DOWN_S, while_down=raising.start)
            raising.join(timeout=90)
        with cluster.apiserver_paused():
            time.sleep(DOWN_S)
        raise_the_quota_then_ask_one_card(kube, namespaces[ROUNDS], decided)
        assert decided == [True] * (ROUNDS + 1)
    finally:
        for ns in namespaces:
            kube.delete(f"/api/v1/namespaces/{ns}")


def test_the_agent_stays_healthy_and_publishes_a_taint_set_while_the_api_server_was_down(
    kube: KubeClient, cluster: LocalCluster, agent: AgentProcess, node: str
) -> None:
    fault = agent.dra_socket.parent / "mock-health" / "gpu-0"
    health_while_down: list[int] = []

    def while_down() -> None:
        fault.parent.mkdir(exist_ok=True)
        fault.write_text("79\n")  # XID 79: fallen off the bus, noticed within a second
        for _ in range(3):
            time.sleep(1.0)
            health_while_down.append(agent_healthz(agent)[0])

    try:
        cluster.restart_apiserver(down_s=DOWN_S, while_down=while_down)
        back_at = time.monotonic()
        wait_for(lambda: devices(kube, node)["gpu-0"].get("taints"), timeout_s=60,
                 what="gpu-0's taint, set while the API server was down")  # fmt: skip
        print(f"the taint was published {time.monotonic() - back_at:.1f} s after the return")
    finally:
        fault.unlink(missing_ok=True)
    assert health_while_down == [200] * 3
    assert agent.process is not None
    assert agent.process.poll() is None  # no crash
    assert agent_healthz(agent)[0] == 200
    wait_for(lambda: not devices(kube, node)["gpu-0"].get("taints"), timeout_s=60,
             what="gpu-0's taint gone once it healed")  # fmt: skip
