"""`vgpu-bridge uninstall-notice` (the chart's pre-delete hook) on the real control plane: it waits
for a GPU pod being deleted until its claim is unprepared and the pod gone, posts one Warning
Event on each running pod of our driver's claims (none on another driver's), reports a pod still
terminating when its wait runs out and exits 0 all the same, and names the API's refusal and
exits 0 too (a failed hook would stop the whole uninstall). The kubelet stand-in plays the
kubelet: a pod being deleted stays until its preparer's unprepare succeeds, which the test holds
back as an agent that has not done it yet."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster
from e2e.cluster.client import Json
from e2e.cluster.kubelet_standin import BoundPod
from e2e.fake_driver import FakeGpuDriver, install_fake_gpu_driver, remove_fake_gpu_driver
from e2e.pods import create_pod, create_share_template, get_pod, running_pod
from e2e.waiting import wait_for
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.uninstall_notice import EVENT_REASON, NoticeSettings, run_notice

pytestmark = pytest.mark.e2e
SHARE = {"memory": "1Gi", "cores": "10"}


class HeldUnprepare:
    """Prepares at once; unprepares only once `release()`d, as an agent still at work."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def prepare(self, pod: BoundPod) -> None:
        return None

    def unprepare(self, pod: BoundPod) -> None:
        if not self.released.is_set():
            raise RuntimeError("the agent has not unprepared this claim yet")

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def held(kubelet_standin: KubeletStandIn) -> Iterator[HeldUnprepare]:
    preparer = HeldUnprepare()
    kubelet_standin.preparer = preparer
    yield preparer
    preparer.release()  # the namespace's pods go after the test


@pytest.fixture
def other_driver(kube: KubeClient, fake_nodes: list[str]) -> Iterator[FakeGpuDriver]:
    driver = install_fake_gpu_driver(kube, {fake_nodes[0]: ["gpu-0"]})
    yield driver
    remove_fake_gpu_driver(kube, driver)


def running_shares(
    kube: KubeClient, namespace: str, driver: FakeGpuDriver, names: list[str]
) -> str:
    """Running pods `names`, each with a share of `driver`'s first node; that node."""
    node = driver.nodes[0]
    template = driver.device_class
    create_share_template(kube, namespace, template, device_class=template, capacity=SHARE)
    for name in names:
        create_pod(kube, namespace, name, template=template, node=node)
    for name in names:
        running_pod(kube, namespace, name)
    return node


def _being_deleted(kube: KubeClient, namespace: str, name: str) -> None:
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
    wait_for(lambda: get_pod(kube, namespace, name)["metadata"].get("deletionTimestamp"),
             what=f"{name} being deleted")  # fmt: skip


def notices(kube: KubeClient, namespace: str) -> list[Json]:
    events = kube.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [e for e in events if e.get("reason") == EVENT_REASON]


def notice_cli(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "vgpu_bridge.cli", "uninstall-notice",
               "--kubeconfig", str(kubeconfig), *args]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def test_waits_for_the_pod_being_deleted_then_tells_each_running_pod_of_our_driver_once(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, fake_gpu_driver: FakeGpuDriver,
    other_driver: FakeGpuDriver, held: HeldUnprepare,
) -> None:  # fmt: skip
    node = running_shares(kube, namespace, fake_gpu_driver, ["running", "leaving"])
    running_shares(kube, namespace, other_driver, ["not-ours"])
    _being_deleted(kube, namespace, "leaving")
    slept: list[float] = []

    def agent_unprepares_meanwhile(seconds: float) -> None:
        slept.append(seconds)
        held.release()  # the agent, still installed, unprepares the claim; the pod goes
        threading.Event().wait(seconds)

    api = KubeApi.connect(str(e2e_cluster.kubeconfig))
    settings = NoticeSettings(drivers=fake_gpu_driver.name, wait_seconds=120)
    notice = run_notice(api, settings, sleep=agent_unprepares_meanwhile)

    assert slept, "the notice never waited for the pod being deleted"
    assert [p.name for p in notice.gone_while_waiting] == ["leaving"]
    assert notice.still_terminating == []
    assert [p.name for p in notice.told] == ["running"]
    assert not kube.exists(f"/api/v1/namespaces/{namespace}/pods/leaving")
    [event] = notices(kube, namespace)
    running = get_pod(kube, namespace, "running")
    assert event["type"] == "Warning"
    assert event["regarding"]["uid"] == running["metadata"]["uid"]
    claim = running["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    assert claim in event["note"]
    assert node in event["note"]
    assert fake_gpu_driver.name in event["note"]


def test_a_pod_still_terminating_when_the_wait_ends_is_reported_and_the_exit_is_zero(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, fake_gpu_driver: FakeGpuDriver,
    held: HeldUnprepare,
) -> None:  # fmt: skip
    running_shares(kube, namespace, fake_gpu_driver, ["running", "stuck"])
    _being_deleted(kube, namespace, "stuck")

    done = notice_cli(e2e_cluster.kubeconfig, "--drivers", fake_gpu_driver.name,
                       "--wait-seconds", "1")  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "1 still terminating after 1 s" in done.stdout, done.stdout
    assert f"{namespace}/stuck" in done.stdout
    assert f"told 1 running pods (Warning Event {EVENT_REASON}): {namespace}/running" in (
        done.stdout
    )
    assert [e["regarding"]["name"] for e in notices(kube, namespace)] == ["running"]
    assert get_pod(kube, namespace, "stuck")["metadata"].get("deletionTimestamp")


def token_kubeconfig(
    kube: KubeClient, cluster: LocalCluster, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig that authenticates as service account `account` of `namespace`."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
               "spec": {"expirationSeconds": 3600}}  # fmt: skip
    token = kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", request)[
        "status"
    ]["token"]
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = account
    path.write_text(yaml.safe_dump(config))
    return path


def test_an_api_refusal_is_named_and_the_exit_is_zero_so_the_uninstall_goes_on(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": "no-rights"}})  # fmt: skip
    kubeconfig = token_kubeconfig(kube, e2e_cluster, namespace, "no-rights",
                                   tmp_path / "kubeconfig")  # fmt: skip

    done = notice_cli(kubeconfig, "--wait-seconds", "0")

    assert done.returncode == 0, done.stdout  # a failed hook would stop the whole uninstall
    assert "HTTP 403" in done.stderr, done.stderr
    assert "resourceclaims" in done.stderr
    assert "the uninstall goes on" in done.stderr
