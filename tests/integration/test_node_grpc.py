"""The node agent over real unix-socket gRPC, as the kubelet calls it: registration, Prepare
answered from the checkpoint after a reboot wiped the CDI specs, Unprepare (repeated, unknown
claims), recovery from a corrupt checkpoint, and per-claim errors when the API cannot be read."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from tests.integration.node_harness import AgentDirs, RunningAgent, agent_dirs, running_agent
from tests.unit.node.claims import GPUS, NODE, allocated_claim, result
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node import checkpoint
from vgpu_bridge.node.kubeletapi import dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_v1_pb2
from vgpu_bridge.node.state import ClaimRef, StateLocked

CLAIM = allocated_claim(
    result("gpu-1", memory="3000Mi", cores="30"),
    uid="0c1a1d00-0000-4000-8000-000000000001",
    name="c1",
    priority=1,
)
REF = ClaimRef("team-a", "c1", "0c1a1d00-0000-4000-8000-000000000001")


@pytest.fixture
def dirs() -> Iterator[AgentDirs]:
    with agent_dirs() as made:
        yield made


@pytest.fixture
def agent(dirs: AgentDirs) -> Iterator[RunningAgent]:
    with running_agent(dirs, GPUS, node=NODE) as running:
        yield running


def _seed_prepared(dirs: AgentDirs) -> None:
    """A checkpoint holding CLAIM as a previous run of the agent left it (its spec not written:
    as after a reboot)."""
    with running_agent(dirs, GPUS, node=NODE) as previous:
        prepared = previous.state.plan(CLAIM, REF)
    checkpoint.save(dirs.checkpoint, {REF.uid: prepared})


def _uid(i: int) -> str:
    return f"0c1a1d00-0000-4000-8000-{i:012d}"


def test_registration_names_our_driver_the_dra_socket_and_v1_first(agent: RunningAgent) -> None:
    info = agent.registration().GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=5)
    assert info.type == "DRAPlugin"
    assert info.name == DEFAULT.driver
    assert info.endpoint == str(agent.server.dra_socket)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    status = pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=True)
    agent.registration().NotifyRegistrationStatus(status, timeout=5)
    assert agent.server.registration.registered.is_set()
    refused = pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=False, error="no")
    agent.registration().NotifyRegistrationStatus(refused, timeout=5)
    assert not agent.server.registration.registered.is_set()


def test_a_claim_the_api_cannot_be_asked_about_fails_alone_and_writes_nothing(
    agent: RunningAgent,
) -> None:
    claims = [dra_v1_pb2.Claim(namespace="team-a", name=f"c{i}", uid=_uid(i)) for i in range(2)]
    response = agent.v1().NodePrepareResources(
        dra_v1_pb2.NodePrepareResourcesRequest(claims=claims), timeout=30
    )
    assert set(response.claims) == {_uid(0), _uid(1)}
    for answer in response.claims.values():
        assert "reading ResourceClaim team-a/" in answer.error
        assert not answer.devices
    assert not any(agent.dirs.layout.cdi_dir.iterdir())


def test_after_a_reboot_a_prepared_claim_gets_its_spec_back_and_the_same_ids(
    dirs: AgentDirs,
) -> None:
    _seed_prepared(dirs)
    spec_file = dirs.layout.spec_path(REF.uid)
    assert not spec_file.exists()  # /var/run is a tmpfs: after a reboot only the checkpoint is left
    with running_agent(dirs, GPUS, node=NODE) as agent:  # the API is unreachable: no API call
        assert spec_file.exists()
        request = dra_v1_pb2.NodePrepareResourcesRequest(
            claims=[
                dra_v1_pb2.Claim(
                    namespace="team-a", name="c1", uid="0c1a1d00-0000-4000-8000-000000000001"
                )
            ]
        )
        first = (
            agent.v1()
            .NodePrepareResources(request, timeout=10)
            .claims["0c1a1d00-0000-4000-8000-000000000001"]
        )
        again = (
            agent.v1()
            .NodePrepareResources(request, timeout=10)
            .claims["0c1a1d00-0000-4000-8000-000000000001"]
        )
    assert first.error == ""
    assert first == again
    [device] = first.devices
    assert list(device.cdi_device_ids) == [
        "k8s.gpu.vgpu-bridge.io/claim=0c1a1d00-0000-4000-8000-000000000001-0"
    ]
    assert (device.pool_name, device.device_name, list(device.request_names)) == (
        NODE,
        "gpu-1",
        ["gpu"],
    )
    assert device.share_id == CLAIM["status"]["allocation"]["devices"]["results"][0]["shareID"]
    env = json.loads(spec_file.read_text())["devices"][0]["containerEdits"]["env"]
    assert env == ["CUDA_DEVICE_MEMORY_LIMIT_0=3000m", "CUDA_DEVICE_SM_LIMIT_0=30"]


def test_v1beta1_answers_the_same_devices_without_share_ids(dirs: AgentDirs) -> None:
    _seed_prepared(dirs)
    with running_agent(dirs, GPUS, node=NODE) as agent:
        request = dra_v1beta1_pb2.NodePrepareResourcesRequest(
            claims=[
                dra_v1beta1_pb2.Claim(
                    namespace="team-a", name="c1", uid="0c1a1d00-0000-4000-8000-000000000001"
                )
            ]
        )
        answer = (
            agent.v1beta1()
            .NodePrepareResources(request, timeout=10)
            .claims["0c1a1d00-0000-4000-8000-000000000001"]
        )
    [device] = answer.devices
    assert list(device.cdi_device_ids) == [
        "k8s.gpu.vgpu-bridge.io/claim=0c1a1d00-0000-4000-8000-000000000001-0"
    ]
    assert "share_id" not in device.DESCRIPTOR.fields_by_name


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_each_version_unprepares_through_the_same_state(dirs: AgentDirs, version: str) -> None:
    messages = {"v1": dra_v1_pb2, "v1beta1": dra_v1beta1_pb2}[version]
    _seed_prepared(dirs)
    with running_agent(dirs, GPUS, node=NODE) as agent:
        stub = agent.v1() if version == "v1" else agent.v1beta1()
        claim = messages.Claim(
            namespace="team-a", name="c1", uid="0c1a1d00-0000-4000-8000-000000000001"
        )
        response = stub.NodeUnprepareResources(
            messages.NodeUnprepareResourcesRequest(claims=[claim]), timeout=10
        )
        assert type(response) is messages.NodeUnprepareResourcesResponse
        assert {uid: r.error for uid, r in response.claims.items()} == {
            "0c1a1d00-0000-4000-8000-000000000001": ""
        }
        assert agent.state.snapshot() == []
    assert not dirs.layout.spec_path(REF.uid).exists()


def test_unprepare_removes_everything_and_repeats_fine_also_for_unknown_claims(
    dirs: AgentDirs,
) -> None:
    _seed_prepared(dirs)
    with running_agent(dirs, GPUS, node=NODE) as agent:
        assert dirs.layout.shared_dir(REF.uid).is_dir()
        request = dra_v1_pb2.NodeUnprepareResourcesRequest(
            claims=[
                dra_v1_pb2.Claim(
                    namespace="team-a", name="c1", uid="0c1a1d00-0000-4000-8000-000000000001"
                ),
                dra_v1_pb2.Claim(
                    namespace="team-a", name="gone", uid="0c1a1d00-0000-4000-8000-0000000000ff"
                ),
            ]
        )
        for _ in range(2):
            response = agent.v1().NodeUnprepareResources(request, timeout=10)
            assert {uid: r.error for uid, r in response.claims.items()} == {
                "0c1a1d00-0000-4000-8000-000000000001": "",
                "0c1a1d00-0000-4000-8000-0000000000ff": "",
            }
        assert agent.state.snapshot() == []
    assert not dirs.layout.spec_path(REF.uid).exists()
    assert not dirs.layout.shared_dir(REF.uid).exists()
    assert checkpoint.load(dirs.checkpoint) == {}


def test_a_corrupt_checkpoint_is_moved_aside_and_the_agent_still_serves(dirs: AgentDirs) -> None:
    _seed_prepared(dirs)
    dirs.checkpoint.write_text(
        '{"version": "v1", "claims": {"0c1a1d00-0000-4000-8000-000000000001": '
    )
    with running_agent(dirs, GPUS, node=NODE) as agent:  # the API is unreachable: cannot rebuild
        info = agent.registration().GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=5)
        assert info.name == DEFAULT.driver
        unprepared = agent.v1().NodeUnprepareResources(
            dra_v1_pb2.NodeUnprepareResourcesRequest(
                claims=[
                    dra_v1_pb2.Claim(
                        namespace="team-a", name="c1", uid="0c1a1d00-0000-4000-8000-000000000001"
                    )
                ]
            ),
            timeout=10,
        )
        assert unprepared.claims["0c1a1d00-0000-4000-8000-000000000001"].error == ""
    assert [p.name.split("-")[0] for p in dirs.plugin.glob("checkpoint.json.corrupt-*")] == [
        "checkpoint.json.corrupt"
    ]
    assert checkpoint.load(dirs.checkpoint) == {}
    assert not dirs.layout.spec_path(REF.uid).exists()  # unprepare works from the uid alone


def test_specs_no_prepared_claim_owns_are_removed_at_start(dirs: AgentDirs) -> None:
    _seed_prepared(dirs)
    orphan = dirs.layout.spec_path(_uid(99))  # crashed before its checkpoint
    orphan.write_text("{}")
    with running_agent(dirs, GPUS, node=NODE):
        assert not orphan.exists()
        assert dirs.layout.spec_path(REF.uid).exists()


def test_sockets_are_removed_on_stop(dirs: AgentDirs) -> None:
    with running_agent(dirs, GPUS, node=NODE) as agent:
        assert agent.server.dra_socket.is_socket()
        assert agent.server.registration_socket.is_socket()
    assert not agent.server.dra_socket.exists()
    assert not agent.server.registration_socket.exists()


def test_every_claim_is_answered_before_the_callers_deadline(agent: RunningAgent) -> None:
    """The API is unreachable, so each new claim costs its retries: claims the call has no time
    left for fail with a reason instead of the whole call timing out."""
    claims = [dra_v1_pb2.Claim(namespace="team-a", name=f"c{i}", uid=_uid(i)) for i in range(50)]
    response = agent.v1().NodePrepareResources(
        dra_v1_pb2.NodePrepareResourcesRequest(claims=claims), timeout=3.5
    )
    errors = [answer.error for answer in response.claims.values()]
    assert len(errors) == 50
    assert any("ran out of time" in error for error in errors)
    assert all(error for error in errors)


def test_a_second_agent_on_the_same_plugin_dir_refuses_to_start(agent: RunningAgent) -> None:
    with (
        pytest.raises(StateLocked, match=r"agent\.lock"),
        running_agent(agent.dirs, GPUS, node=NODE),
    ):
        pass
    response = agent.registration().GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=5)
    assert response.name == DEFAULT.driver  # the first one serves on


def test_an_unwritable_cdi_dir_at_start_fails_the_claim_not_the_agent(dirs: AgentDirs) -> None:
    _seed_prepared(dirs)
    cdi = dirs.layout.cdi_dir
    cdi.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(cdi)],
                      capture_output=True, check=False).returncode:  # fmt: skip
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        with running_agent(dirs, GPUS, node=NODE) as agent:  # starts despite the read-only dir
            request = dra_v1_pb2.NodePrepareResourcesRequest(
                claims=[
                    dra_v1_pb2.Claim(
                        namespace="team-a", name="c1", uid="0c1a1d00-0000-4000-8000-000000000001"
                    )
                ]
            )
            refused = (
                agent.v1()
                .NodePrepareResources(request, timeout=10)
                .claims["0c1a1d00-0000-4000-8000-000000000001"]
            )
            assert "cannot rewrite the CDI spec" in refused.error
            assert "Read-only file system" in refused.error
            subprocess.run(["mount", "-o", "remount,rw", str(cdi)], check=True)
            prepared = (
                agent.v1()
                .NodePrepareResources(request, timeout=10)
                .claims["0c1a1d00-0000-4000-8000-000000000001"]
            )
            assert prepared.error == ""
            assert dirs.layout.spec_path("0c1a1d00-0000-4000-8000-000000000001").exists()
    finally:
        subprocess.run(["umount", str(cdi)], check=False)
