"""Who uses a claim, from the kubelet's node-local pod-resources socket instead of the API's pods
(issue 35, item 7: the agent's account may read no pod): the kubelet's answer over a real unix
socket, the containers it names for each claim of the pods the claim is reserved for, and HAMi's
series naming namespace, pod and container as they did when pods were read."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.node.claims import NODE
from tests.unit.node.fake_kubelet import FakeKubelet, serving
from tests.unit.node.hami_objects import (
    CONTAINER_ID,
    NAMESPACE,
    ObjectsApi,
    claim_path,
    pod,
    pod_path,
    reserved_claim,
)
from tests.unit.node.test_hami_metrics import (
    OTHER_ID,
    UID_A,
    Clock,
    MiB,
    _cgroup,
    _container,
    _region,
    _scrape,
    agent,
    prepared,
)
from vgpu_bridge.kube import KubeError
from vgpu_bridge.node import pod_resources
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.checkpoint import PreparedClaim
from vgpu_bridge.node.hami_metrics import PodNames
from vgpu_bridge.node.pod_resources import ContainerUse, PodResources, PodResourcesUnavailable

__all__ = ["agent"]  # the fixture, shared with test_hami_metrics

CLAIM_NAME = "infer-gpu-x1"
GPU_0 = (NODE, "gpu-0")


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[FakeKubelet, PodResources]]:
    fake = FakeKubelet({(NAMESPACE, "infer"): {"main": [(NAMESPACE, CLAIM_NAME, [GPU_0])],
                                               "sidecar": []}})  # fmt: skip
    with serving(fake, tmp_path / "kubelet.sock") as socket:
        yield fake, PodResources(socket)


def test_the_kubelets_answer_names_each_claims_containers_by_pod_and_position(
    kubelet: tuple[FakeKubelet, PodResources],
) -> None:
    fake, client = kubelet
    fake.pods = {
        (NAMESPACE, "infer"): {
            "main": [("other", "foreign", []), (NAMESPACE, CLAIM_NAME, [GPU_0])],
            "sidecar": [],
        },
        ("team-b", "train"): {"trainer": [("team-b", "train-gpu", [(NODE, "gpu-1")])]},
    }
    assert client.available()
    assert client.list_claim_users() == {
        ("other", "foreign"): [ContainerUse(NAMESPACE, "infer", "main", 0)],
        (NAMESPACE, CLAIM_NAME): [ContainerUse(NAMESPACE, "infer", "main", 1, frozenset({GPU_0}))],
        ("team-b", "train-gpu"): [
            ContainerUse("team-b", "train", "trainer", 0, frozenset({(NODE, "gpu-1")}))
        ],
    }


def test_a_socket_that_is_not_there_is_unavailable(tmp_path: Path) -> None:
    client = PodResources(tmp_path / "none.sock")
    assert not client.available()
    with pytest.raises(PodResourcesUnavailable, match=r"none\.sock"):
        client.list_claim_users()


def test_an_answer_past_the_bound_is_unavailable_not_read(
    kubelet: tuple[FakeKubelet, PodResources], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, client = kubelet
    fake.pods = {(NAMESPACE, f"pod-{i}"): {"main": [(NAMESPACE, f"claim-{i}", [GPU_0])]}
                 for i in range(40)}  # fmt: skip
    monkeypatch.setattr(pod_resources, "MAX_ANSWER_BYTES", 1024)
    with pytest.raises(PodResourcesUnavailable, match="RESOURCE_EXHAUSTED"):
        client.list_claim_users()


def test_a_kubelet_that_does_not_answer_in_time_is_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answered = threading.Event()
    fake = FakeKubelet({}, hold=answered)
    monkeypatch.setattr(pod_resources, "CALL_TIMEOUT_S", 0.05)
    with serving(fake, tmp_path / "kubelet.sock") as socket:
        try:
            with pytest.raises(PodResourcesUnavailable, match="DEADLINE_EXCEEDED"):
                PodResources(socket).list_claim_users()
        finally:
            answered.set()


def test_the_claims_containers_come_from_the_kubelet_and_no_pod_is_read(
    kubelet: tuple[FakeKubelet, PodResources],
) -> None:
    fake, client = kubelet
    infer = pod(containers={"main": ["gpu"], "sidecar": []})
    claim = reserved_claim(uid=UID_A, pods=[infer])
    api = ObjectsApi(claim)  # the pod is not readable: the agent must not need it
    names = PodNames(api, lambda: [prepared(UID_A, CLAIM_NAME, ("GPU-aaaa", 3000, 30))],
                     pod_resources=client, clock=Clock())  # fmt: skip
    assert names.sync() == 1  # the claim; the kubelet is not the API server
    [consumer] = names.consumers(prepared(UID_A, CLAIM_NAME, ("GPU-aaaa", 3000, 30)))
    meta = infer["metadata"]
    assert (consumer.namespace, consumer.pod, consumer.pod_uid, consumer.container) == (
        NAMESPACE, "infer", meta["uid"], "main",
    )  # fmt: skip
    assert api.calls == [claim_path(claim)]
    assert pod_path(infer) not in api.calls
    names.sync()
    assert fake.calls == 2  # asked once a sync


def test_a_pod_the_claim_is_not_reserved_for_uses_none_of_it(
    kubelet: tuple[FakeKubelet, PodResources],
) -> None:
    fake, client = kubelet
    fake.pods = {**fake.pods, (NAMESPACE, "intruder"): {"x": [(NAMESPACE, CLAIM_NAME, [GPU_0])]}}
    infer = pod(containers={"main": ["gpu"]})
    claim = prepared(UID_A, CLAIM_NAME, ("GPU-aaaa", 3000, 30))
    names = PodNames(ObjectsApi(reserved_claim(uid=UID_A, pods=[infer])), lambda: [claim],
                     pod_resources=client, clock=Clock())  # fmt: skip
    names.sync()
    assert [c.pod for c in names.consumers(claim)] == ["infer"]


def test_pods_the_agent_may_not_read_are_not_asked_for_again() -> None:
    infer = pod(containers={"main": ["gpu"]})
    claim = prepared(UID_A, CLAIM_NAME, ("GPU-aaaa", 3000, 30))

    class NoPods(ObjectsApi):
        def get(self, path: str) -> dict[str, object]:
            if path.startswith("/api/v1/"):
                self.calls.append(path)
                raise KubeError("GET", path, 403, "pods is forbidden")
            return super().get(path)

    api = NoPods(reserved_claim(uid=UID_A, pods=[infer]))
    names = PodNames(api, lambda: [claim], clock=Clock())
    assert names.sync() == 2  # the claim, then its pod: refused
    assert names.sync() == 0
    assert [p for p in api.calls if p.startswith("/api/v1/")] == [pod_path(infer)]


def test_hami_series_name_namespace_pod_and_container_from_the_kubelet(
    tmp_path: Path,
    agent: tuple[CdiLayout, Path, list[PreparedClaim]],
    kubelet: tuple[FakeKubelet, PodResources],
) -> None:
    layout, proc, _ = agent
    _, client = kubelet
    infer = pod(containers={"main": ["gpu"], "sidecar": []})
    api = ObjectsApi(reserved_claim(uid=UID_A, pods=[infer]))
    claim = prepared(UID_A, CLAIM_NAME, ("GPU-aaaa", 3000, 30))
    _cgroup(proc, 4001, CONTAINER_ID)
    layout.shared_dir(UID_A).mkdir(parents=True)
    region = _region(["GPU-aaaa"], [(4001, 40, [1000 * MiB])])
    (layout.shared_dir(UID_A) / "vgpu.cache").write_bytes(region)
    samples = _scrape(tmp_path, layout, proc, [claim], api, pod_resources=client)
    main = _container("main", 0, "GPU-aaaa")
    assert samples[("hami_vgpu_memory_limit_bytes", main)] == 3000 * MiB
    assert samples[("hami_vgpu_memory_used_bytes", main)] == 1000 * MiB
    assert samples[("hami_container_device_utilization_ratio", main)] == 40
    assert not [k for k in samples if dict(k[1]).get("container") == "sidecar"]


def test_a_claim_two_containers_share_has_both_limits_and_no_guessed_use(
    tmp_path: Path,
    agent: tuple[CdiLayout, Path, list[PreparedClaim]],
    kubelet: tuple[FakeKubelet, PodResources],
) -> None:
    layout, proc, _ = agent
    fake, client = kubelet
    fake.pods = {(NAMESPACE, "infer"): {"main": [(NAMESPACE, CLAIM_NAME, [GPU_0])],
                                        "helper": [(NAMESPACE, CLAIM_NAME, [GPU_0])]}}  # fmt: skip
    infer = pod(containers={"main": ["gpu"], "helper": ["gpu"]})
    api = ObjectsApi(reserved_claim(uid=UID_A, pods=[infer]))
    claim = prepared(UID_A, CLAIM_NAME, ("GPU-aaaa", 3000, 30))
    _cgroup(proc, 4001, CONTAINER_ID)
    _cgroup(proc, 4002, OTHER_ID)
    layout.shared_dir(UID_A).mkdir(parents=True)
    region = _region(["GPU-aaaa"], [(4001, 40, [1000 * MiB]), (4002, 25, [200 * MiB])])
    (layout.shared_dir(UID_A) / "vgpu.cache").write_bytes(region)
    samples = _scrape(tmp_path, layout, proc, [claim], api, pod_resources=client)
    main, helper = _container("main", 0, "GPU-aaaa"), _container("helper", 0, "GPU-aaaa")
    assert samples[("hami_vgpu_memory_limit_bytes", main)] == 3000 * MiB
    assert samples[("hami_vgpu_memory_limit_bytes", helper)] == 3000 * MiB
    assert ("hami_vgpu_memory_used_bytes", main) not in samples  # the kubelet names no runtime id


def test_a_claim_two_pods_share_counts_each_pods_processes_to_its_one_container(
    tmp_path: Path,
    agent: tuple[CdiLayout, Path, list[PreparedClaim]],
    kubelet: tuple[FakeKubelet, PodResources],
) -> None:
    layout, proc, _ = agent
    fake, client = kubelet
    other_uid = "9d0d0000-0000-4000-8000-000000000002"
    fake.pods = {(NAMESPACE, "infer"): {"main": [(NAMESPACE, "team-gpu", [GPU_0])]},
                 (NAMESPACE, "other"): {"worker": [(NAMESPACE, "team-gpu", [GPU_0])]}}  # fmt: skip
    infer = pod(containers={"main": ["shared"]}, entries={"shared": "team-gpu"})
    other = pod("other", uid=other_uid, containers={"worker": ["shared"]},
                entries={"shared": "team-gpu"})  # fmt: skip
    api = ObjectsApi(reserved_claim("team-gpu", uid=UID_A, pods=[infer, other], owned=False))
    claim = prepared(UID_A, "team-gpu", ("GPU-aaaa", 3000, 30))
    _cgroup(proc, 4001, CONTAINER_ID)
    _cgroup(proc, 4002, OTHER_ID, pod_uid=other_uid)
    layout.shared_dir(UID_A).mkdir(parents=True)
    region = _region(["GPU-aaaa"], [(4001, 40, [1000 * MiB]), (4002, 25, [200 * MiB])])
    (layout.shared_dir(UID_A) / "vgpu.cache").write_bytes(region)
    samples = _scrape(tmp_path, layout, proc, [claim], api, pod_resources=client)
    main = _container("main", 0, "GPU-aaaa")
    worker = _container("worker", 0, "GPU-aaaa", pod_name="other")
    assert samples[("hami_vgpu_memory_used_bytes", main)] == 1000 * MiB
    assert samples[("hami_vgpu_memory_used_bytes", worker)] == 200 * MiB
