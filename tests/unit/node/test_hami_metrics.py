"""The agent's HAMi-compatible series (`--hami-metrics`): who uses a claim (the claim's
`reservedFor`, each pod's `resources.claims`), looked up in the background and cached by claim and
pod uid; and the series HAMi's dashboards read, with HAMi's names, labels and units, from the
checkpoint and libvgpu's regions."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.node.claims import GPUS, NODE
from tests.unit.node.hami_objects import (
    CONTAINER_ID,
    NAMESPACE,
    POD_UID,
    ObjectsApi,
    pod,
    pod_path,
    reserved_claim,
)
from tests.unit.node.test_checkpoint import CLAIM
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node import checkpoint
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.checkpoint import PreparedClaim, PreparedDevice
from vgpu_bridge.node.hami_metrics import (
    MAX_CALLS_PER_SYNC,
    POD_REFETCH_S,
    REFRESH_S,
    Consumer,
    HamiSeries,
    PodNames,
    consumers_in_pod,
)
from vgpu_bridge.node.metrics import NodeCollector
from vgpu_bridge.node.pod_resources import PodResources
from vgpu_bridge.node.region import (
    COUNTS_OFFSET,
    DEVICES_OFFSET,
    REGION_MAGIC,
    REGION_SIZE,
    REGION_VERSION,
    SLOT_SIZE,
    SLOTS_OFFSET,
)
from vgpu_bridge.node.settings import Settings
from vgpu_bridge.node.state import DeviceState

MiB = 2**20
UID_A = "0c1a1d00-0000-4000-8000-00000000000a"
UID_B = "0c1a1d00-0000-4000-8000-00000000000b"
OTHER_ID = "d" * 64


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def prepared(uid: str, name: str, *devices: tuple[str, int, int]) -> PreparedClaim:
    """A prepared claim with a share per (uuid, MiB, cores)."""
    return CLAIM.model_copy(
        update={
            "uid": uid,
            "name": name,
            "namespace": NAMESPACE,
            "devices": tuple(
                CLAIM.devices[0].model_copy(
                    update={"uuid": u, "memory": m * MiB, "cores": c, "device_name": f"gpu-{i}"}
                )
                for i, (u, m, c) in enumerate(devices)
            ),
        }
    )


# --- who uses a claim ---------------------------------------------------------------------


def test_a_template_claim_is_used_by_the_containers_that_list_the_pods_entry_for_it() -> None:
    infer = pod(containers={"main": ["gpu"], "sidecar": []}, init_containers={"warm": ["gpu"]},
                container_ids={"main": CONTAINER_ID})  # fmt: skip
    found = consumers_in_pod(infer, claim_name="infer-gpu-x1")
    assert [(c.container, c.position, c.container_ids) for c in found] == [
        ("warm", 0, frozenset()),
        ("main", 0, frozenset({CONTAINER_ID})),
    ]
    assert {(c.namespace, c.pod, c.pod_uid) for c in found} == {(NAMESPACE, "infer", POD_UID)}
    assert consumers_in_pod(infer, claim_name="another-claim") == []


def test_a_named_claim_is_found_by_resource_claim_name_and_a_request_narrows_it() -> None:
    shared = pod(containers={"a": ["x", "shared"]}, entries={"shared": "team-gpu", "x": "other"})
    shared["spec"]["containers"][0]["resources"]["claims"][1]["request"] = "big"
    [consumer] = consumers_in_pod(shared, claim_name="team-gpu")
    assert (consumer.container, consumer.position, consumer.requests) == (
        "a",
        1,
        frozenset({"big"}),
    )
    big = PreparedDevice.model_validate({**CLAIM.devices[0].model_dump(), "request_names": ["big"]})
    assert consumer.takes(big)
    assert not consumer.takes(CLAIM.devices[0])  # request "gpu"


def _names(
    api: ObjectsApi,
    claims: list[PreparedClaim],
    clock: Clock,
    *,
    max_calls: int = MAX_CALLS_PER_SYNC,
) -> PodNames:
    return PodNames(api, lambda: claims, clock=clock, max_calls=max_calls)


def test_a_claim_and_its_pod_are_read_once_then_served_from_the_cache() -> None:
    infer = pod()
    api = ObjectsApi(reserved_claim(uid=UID_A, pods=[infer]), infer)
    claim = prepared(UID_A, "infer-gpu-x1", ("GPU-aaaa", 3000, 30))
    clock = Clock()
    names = _names(api, [claim], clock)
    assert names.consumers(claim) == []  # before the first lookup: nothing, and no call
    assert api.calls == []
    assert names.sync() == 2
    assert [c.container for c in names.consumers(claim)] == ["main"]
    clock.now += 10 * REFRESH_S
    assert names.sync() == 0  # a claim its pod owns never changes its reservedFor
    assert len(api.calls) == 2


def test_a_claim_no_pod_owns_is_read_again_for_pods_added_to_its_reserved_for() -> None:
    first, second = pod("a", uid=POD_UID), pod("b", uid=POD_UID.replace("1", "2"))
    for p in (first, second):
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "team-gpu"}]
        p["status"]["resourceClaimStatuses"] = []
    api = ObjectsApi(reserved_claim("team-gpu", uid=UID_A, pods=[first], owned=False), first,
                     second)  # fmt: skip
    claim = prepared(UID_A, "team-gpu", ("GPU-aaaa", 3000, 30))
    clock = Clock()
    names = _names(api, [claim], clock)
    names.sync()
    api.add(reserved_claim("team-gpu", uid=UID_A, pods=[first, second], owned=False))
    clock.now += REFRESH_S - 1
    assert names.sync() == 0
    clock.now += 1
    assert names.sync() == 2  # the claim, then only the pod not yet known
    assert sorted(c.pod for c in names.consumers(claim)) == ["a", "b"]


def test_a_pod_with_an_unknown_container_is_read_again_but_not_more_often_than_allowed() -> None:
    infer = pod(container_ids={"main": CONTAINER_ID})
    api = ObjectsApi(reserved_claim(uid=UID_A, pods=[infer]), infer)
    claim = prepared(UID_A, "infer-gpu-x1", ("GPU-aaaa", 3000, 30))
    clock = Clock()
    names = _names(api, [claim], clock)
    names.sync()
    api.add(pod(container_ids={"main": OTHER_ID}))  # the container restarted
    names.unknown_container(POD_UID)
    assert names.sync() == 0
    clock.now += POD_REFETCH_S
    assert names.sync() == 1
    [consumer] = names.consumers(claim)
    assert consumer.container_ids == {OTHER_ID}


def test_claims_no_longer_prepared_and_their_pods_leave_the_cache() -> None:
    infer = pod()
    api = ObjectsApi(reserved_claim(uid=UID_A, pods=[infer]), infer)
    claim = prepared(UID_A, "infer-gpu-x1", ("GPU-aaaa", 3000, 30))
    claims = [claim]
    names = PodNames(api, lambda: claims, clock=Clock())
    names.sync()
    claims.clear()
    names.sync()
    assert names.consumers(claim) == []
    claims.append(claim)
    assert names.sync() == 2  # read afresh


@pytest.mark.parametrize(
    "change",
    [
        pytest.param("claim-gone", id="claim-gone"),
        pytest.param("claim-replaced", id="claim-replaced"),
        pytest.param("pod-replaced", id="pod-of-that-name-replaced"),
        pytest.param("pod-gone", id="pod-gone"),
    ],
)
def test_a_gone_or_replaced_claim_or_pod_has_no_users(change: str) -> None:
    infer = pod()
    reserved = reserved_claim(uid=UID_A, pods=[infer])
    api = ObjectsApi(reserved, infer)
    if change == "claim-gone":
        api.objects.clear()
    elif change == "claim-replaced":
        reserved["metadata"]["uid"] = UID_B
        api.add(reserved)
    elif change == "pod-replaced":
        api.add(pod(uid=POD_UID.replace("1", "9")))
    else:
        del api.objects[pod_path(infer)]
    claim = prepared(UID_A, "infer-gpu-x1", ("GPU-aaaa", 3000, 30))
    names = _names(api, [claim], Clock())
    names.sync()
    assert names.consumers(claim) == []


def test_one_sync_makes_at_most_its_budget_of_calls_and_the_next_goes_on() -> None:
    pods = [pod(f"p{i}", uid=f"9d0d0000-0000-4000-8000-00000000010{i}") for i in range(3)]
    claims, objects = [], []
    for i, p in enumerate(pods):
        uid = f"0c1a1d00-0000-4000-8000-00000000010{i}"
        p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": f"c{i}"}]
        objects += [reserved_claim(f"c{i}", uid=uid, pods=[p]), p]
        claims.append(prepared(uid, f"c{i}", ("GPU-aaaa", 1000, 0)))
    names = _names(ObjectsApi(*objects), claims, Clock(), max_calls=4)
    assert [names.sync(), names.sync(), names.sync()] == [4, 2, 0]
    assert all(len(names.consumers(c)) == 1 for c in claims)


def test_an_unreachable_api_stops_the_sync_leaves_the_cache_and_is_tried_again() -> None:
    infer = pod()
    api = ObjectsApi(reserved_claim(uid=UID_A, pods=[infer]), infer)
    claim = prepared(UID_A, "infer-gpu-x1", ("GPU-aaaa", 3000, 30))
    gone = prepared(UID_B, "gone", ("GPU-bbbb", 1000, 0))  # 404: no users, and no stop
    names = _names(api, [claim, gone], Clock())

    def refuse(path: str) -> dict[str, object]:
        raise ConnectionRefusedError("connection refused")

    reachable = api.get
    api.get = refuse  # type: ignore[method-assign]
    assert names.sync() == 1
    assert names.consumers(claim) == []
    api.get = reachable  # type: ignore[method-assign]
    assert names.sync() == 3
    assert len(names.consumers(claim)) == 1
    assert names.consumers(gone) == []


# --- the series ----------------------------------------------------------------------------


def _region(uuids: list[str], slots: list[tuple[int, int, list[int]]]) -> bytes:
    """A region with `uuids` and a live slot per (host pid, SM percent, bytes per device)."""
    data = bytearray(REGION_SIZE)
    struct.pack_into("<IIQ", data, 0, REGION_MAGIC, REGION_VERSION, REGION_SIZE)
    struct.pack_into("<II", data, COUNTS_OFFSET, len(uuids), len(slots))
    for d, uuid in enumerate(uuids):
        struct.pack_into("<48sQII", data, DEVICES_OFFSET + d * 64, uuid.encode(), 0, 0, 0)
    for s, (host_pid, sm, used) in enumerate(slots):
        base = SLOTS_OFFSET + s * SLOT_SIZE
        struct.pack_into("<iiQ", data, base, 100 + s, host_pid, 1)
        struct.pack_into("<I", data, base + 20, sm)
        struct.pack_into(f"<{len(used)}Q", data, base + 24, *used)
    return bytes(data)


def _cgroup(proc: Path, host_pid: int, container_id: str, pod_uid: str = POD_UID) -> None:
    (proc / str(host_pid)).mkdir(parents=True)
    slice_uid = pod_uid.replace("-", "_")
    (proc / str(host_pid) / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-pod{slice_uid}.slice/cri-containerd-{container_id}.scope\n"
    )


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def agent(tmp_path: Path) -> tuple[CdiLayout, Path, list[PreparedClaim]]:
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    proc = tmp_path / "proc"
    proc.mkdir()
    return layout, proc, []


def _scrape(
    tmp_path: Path,
    layout: CdiLayout,
    proc: Path,
    claims: list[PreparedClaim],
    api: ObjectsApi,
    *,
    pod_resources: PodResources | None = None,
) -> Samples:
    """HAMi's samples of one scrape, the claims' users looked up first (from the kubelet's
    socket when `pod_resources`, else from the API's pods)."""
    checkpoint_file = tmp_path / "plugin" / "checkpoint.json"
    checkpoint_file.parent.mkdir(exist_ok=True)
    checkpoint.save(checkpoint_file, {c.uid: c for c in claims})
    state = DeviceState(api, node=NODE, profile=DEFAULT, gpus=GPUS, layout=layout,
                        checkpoint_file=checkpoint_file)  # fmt: skip
    state.start()
    try:
        names = PodNames(api, state.snapshot, clock=Clock(), pod_resources=pod_resources)
        names.sync()
        hami = HamiSeries(names, GPUS, node=NODE)
        registry = CollectorRegistry()
        registry.register(NodeCollector(state, GPUS, node=NODE, vgpu_dir=layout.vgpu_dir,
                                        proc=proc, hami=hami))  # fmt: skip
        text = generate_latest(registry).decode()
    finally:
        state.close()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("hami_")
    }


def _container(
    container: str, index: int, uuid: str, pod_name: str = "infer"
) -> tuple[tuple[str, str], ...]:
    labels = {"namespace": NAMESPACE, "pod": pod_name, "container": container,
              "vdevice_index": str(index), "device_uuid": uuid, "zone": "vGPU"}  # fmt: skip
    return tuple(sorted(labels.items()))


def test_two_containers_of_a_pod_sharing_a_claim_each_show_their_own_memory(
    tmp_path: Path, agent: tuple[CdiLayout, Path, list[PreparedClaim]]
) -> None:
    layout, proc, _ = agent
    infer = pod(containers={"main": ["gpu"], "helper": ["gpu"]},
                container_ids={"main": CONTAINER_ID, "helper": OTHER_ID})  # fmt: skip
    api = ObjectsApi(reserved_claim(uid=UID_A, pods=[infer]), infer)
    claim = prepared(UID_A, "infer-gpu-x1", ("GPU-aaaa", 3000, 30))
    _cgroup(proc, 4001, CONTAINER_ID)
    _cgroup(proc, 4002, OTHER_ID)
    region = _region(["GPU-aaaa"], [(4001, 40, [1000 * MiB]), (4002, 25, [200 * MiB])])
    layout.shared_dir(UID_A).mkdir(parents=True)
    (layout.shared_dir(UID_A) / "vgpu.cache").write_bytes(region)
    samples = _scrape(tmp_path, layout, proc, [claim], api)
    main, helper = _container("main", 0, "GPU-aaaa"), _container("helper", 0, "GPU-aaaa")
    assert samples[("hami_vgpu_memory_used_bytes", main)] == 1000 * MiB
    assert samples[("hami_vgpu_memory_used_bytes", helper)] == 200 * MiB
    assert samples[("hami_container_device_memory_bytes", helper)] == 200 * MiB
    assert samples[("hami_vgpu_memory_limit_bytes", main)] == 3000 * MiB  # the claim's, shared
    assert samples[("hami_vgpu_memory_limit_bytes", helper)] == 3000 * MiB
    assert samples[("hami_container_device_utilization_ratio", main)] == 40  # the claim's, percent


def test_a_containers_devices_are_numbered_in_the_order_it_lists_its_claims(
    tmp_path: Path, agent: tuple[CdiLayout, Path, list[PreparedClaim]]
) -> None:
    layout, proc, _ = agent
    infer = pod(containers={"main": ["second", "first"]},
                generated={"first": "c-first", "second": "c-second"})  # fmt: skip
    api = ObjectsApi(reserved_claim("c-first", uid=UID_A, pods=[infer]),
                     reserved_claim("c-second", uid=UID_B, pods=[infer]), infer)  # fmt: skip
    claims = [prepared(UID_A, "c-first", ("GPU-aaaa", 1000, 0)),
              prepared(UID_B, "c-second", ("GPU-bbbb", 2000, 0))]  # fmt: skip
    samples = _scrape(tmp_path, layout, proc, claims, api)
    limits = {
        labels: v for (name, labels), v in samples.items() if name == "hami_vgpu_memory_limit_bytes"
    }
    assert limits == {
        _container("main", 0, "GPU-bbbb"): 2000 * MiB,  # "second" is listed first
        _container("main", 1, "GPU-aaaa"): 1000 * MiB,
    }
    # no region yet (no CUDA process): the limits only, as HAMi shows nothing used
    assert not any(name == "hami_vgpu_memory_used_bytes" for name, _ in samples)


def test_the_card_series_are_what_hamis_scheduler_reports_for_the_prepared_shares(
    tmp_path: Path, agent: tuple[CdiLayout, Path, list[PreparedClaim]]
) -> None:
    layout, proc, _ = agent
    claims = [prepared(UID_A, "a", ("GPU-aaaa", 3000, 30)),
              prepared(UID_B, "b", ("GPU-aaaa", 5000, 50))]  # fmt: skip
    samples = _scrape(tmp_path, layout, proc, claims, ObjectsApi())
    card = tuple(
        sorted(
            {
                "node": NODE,
                "device_uuid": "GPU-aaaa",
                "device_index": "0",
                "device_type": "NVIDIA-NVIDIA H100 80GB HBM3",
                "zone": "vGPU",
            }.items()
        )
    )
    with_cores = tuple(sorted({**dict(card), "device_cores": "100"}.items()))
    ratio = tuple(sorted({"node": NODE, "device_uuid": "GPU-aaaa", "device_index": "0",
                          "zone": "vGPU"}.items()))  # fmt: skip
    assert samples[("hami_gpu_memory_limit_bytes", card)] == 80 * 2**30
    assert samples[("hami_gpu_core_limit_ratio", card)] == 100
    assert samples[("hami_gpu_memory_allocated_bytes", with_cores)] == 8000 * MiB
    assert samples[("hami_gpu_core_allocated_ratio", card)] == 80
    assert samples[("hami_gpu_shared_count", card)] == 2
    assert samples[("hami_node_gpu_memory_allocated_ratio", ratio)] == 8000 * MiB / (80 * 2**30)
    # users not found (no pod): the card series only
    assert not any(name.startswith(("hami_vgpu", "hami_container")) for name, _ in samples)


def test_without_hami_metrics_the_agent_serves_no_hami_series(
    tmp_path: Path, agent: tuple[CdiLayout, Path, list[PreparedClaim]]
) -> None:
    layout, _, _ = agent
    checkpoint_file = tmp_path / "plugin" / "checkpoint.json"
    checkpoint_file.parent.mkdir()
    checkpoint.save(checkpoint_file, {UID_A: prepared(UID_A, "a", ("GPU-aaaa", 3000, 30))})
    state = DeviceState(ObjectsApi(), node=NODE, profile=DEFAULT, gpus=GPUS, layout=layout,
                        checkpoint_file=checkpoint_file)  # fmt: skip
    state.start()
    registry = CollectorRegistry()
    registry.register(NodeCollector(state, GPUS, node=NODE, vgpu_dir=layout.vgpu_dir))
    text = generate_latest(registry).decode()
    state.close()
    assert "vgpu_bridge_gpu_memory_bytes" in text
    assert "hami_" not in text


def test_a_consumer_without_requests_takes_every_device() -> None:
    consumer = Consumer(NAMESPACE, "infer", POD_UID, "main", 0)
    assert consumer.takes(CLAIM.devices[0])


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        pytest.param([], {}, False, id="off-by-default"),
        pytest.param(["--hami-metrics", "true"], {}, True, id="flag"),
        pytest.param([], {"VGPU_BRIDGE_HAMI_METRICS": "true"}, True, id="env-as-the-chart-sets-it"),
    ],
)
def test_hami_metrics_is_a_setting_of_the_agent(
    argv: list[str], environ: dict[str, str], expected: bool
) -> None:
    settings = Settings.from_args(["--node-name", NODE, *argv], environ)
    assert settings.hami_metrics is expected


def test_a_process_in_a_container_its_pod_does_not_list_has_the_pod_read_again(
    tmp_path: Path, agent: tuple[CdiLayout, Path, list[PreparedClaim]]
) -> None:
    layout, proc, _ = agent
    infer = pod(containers={"main": ["gpu"], "helper": ["gpu"]},
                container_ids={"main": CONTAINER_ID})  # fmt: skip
    api = ObjectsApi(reserved_claim(uid=UID_A, pods=[infer]), infer)
    claim = prepared(UID_A, "infer-gpu-x1", ("GPU-aaaa", 3000, 30))
    _cgroup(proc, 4002, OTHER_ID)  # helper's process: its id is not in the pod's status yet
    region = _region(["GPU-aaaa"], [(4002, 25, [200 * MiB])])
    layout.shared_dir(UID_A).mkdir(parents=True)
    (layout.shared_dir(UID_A) / "vgpu.cache").write_bytes(region)
    checkpoint_file = tmp_path / "plugin" / "checkpoint.json"
    checkpoint_file.parent.mkdir()
    checkpoint.save(checkpoint_file, {UID_A: claim})
    state = DeviceState(api, node=NODE, profile=DEFAULT, gpus=GPUS, layout=layout,
                        checkpoint_file=checkpoint_file)  # fmt: skip
    state.start()
    clock = Clock()
    names = PodNames(api, state.snapshot, clock=clock)
    names.sync()
    collector = NodeCollector(state, GPUS, node=NODE, vgpu_dir=layout.vgpu_dir, proc=proc,
                              hami=HamiSeries(names, GPUS, node=NODE))  # fmt: skip
    assert _helper_used(collector) == [0]  # not counted to a container it cannot name
    clock.now += POD_REFETCH_S
    api.add(pod(containers={"main": ["gpu"], "helper": ["gpu"]},
                container_ids={"main": CONTAINER_ID, "helper": OTHER_ID}))  # fmt: skip
    assert names.sync() == 1  # the pod, read again
    helper = _helper_used(collector)
    clock.now += POD_REFETCH_S
    calls = names.sync()  # every process's container is known now: nothing to read again
    state.close()
    assert helper == [200 * MiB]
    assert calls == 0


def _helper_used(collector: NodeCollector) -> list[float]:
    return [
        s.value
        for m in collector.collect()
        for s in m.samples
        if s.name == "hami_vgpu_memory_used_bytes" and s.labels["container"] == "helper"
    ]
