"""Issue #25 items 2 and 3 against the real binaries: a tenant that reorders
CUDA_VISIBLE_DEVICES, and a container that got two claims' GPUs but one claim's limits file.

The real node agent (`vgpu-bridge node`, mock GPUs whose UUIDs the fake driver reports) prepares
the claims; its limits file is put at libvgpu's compiled-in path in a private mount namespace
(`test_limits_file contain`, root only), as the CDI mount would; the workload runs with the CDI
spec's environment, libvgpu preloaded over the fake driver, which plays the GPUs
NVIDIA_VISIBLE_DEVICES names. The webhook refuses a pod whose container names two claims of our
class before any of this could happen."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.abuse.agent import AgentDirs, agent_dirs, running_agent
from tests.abuse.fake_api import FakeApi
from tests.abuse.hostile import review
from tests.abuse.webhook_client import Client, Webhook
from tests.native_workload import CUDA_DECLARATIONS, NATIVE, build_workload
from tests.unit.node.claims import NODE, allocated_claim, result
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.cdi import CONTAINER_SHARED_DIR
from vgpu_bridge.node.kubeletapi import dra_v1_pb2

UUID_0 = "GPU-e2e00000-0000-4000-8000-0000000000a0"
UUID_1 = "GPU-e2e00000-0000-4000-8000-0000000000a1"
MOCK_GPUS = f"""\
- {{uuid: {UUID_0}, productName: NVIDIA H100 80GB HBM3, memory: 16Gi}}
- {{uuid: {UUID_1}, productName: NVIDIA H100 80GB HBM3, memory: 16Gi}}
"""
OK, OUT_OF_MEMORY, INVALID_DEVICE = 0, 2, 101  # CUresult
WORKLOAD = (
    CUDA_DECLARATIONS
    + r"""
/* each argument ORDINAL:MIB allocates (and keeps) MIB on CUDA ordinal ORDINAL; prints the code
 * (the context's, when there is none on that device) */
int main(int argc, char **argv) {
    CUdevice dev; CUcontext ctx; CUdeviceptr p; int ordinal; long long mib; CUresult r;
    if (cuInit(0)) return 90;
    for (int i = 1; i < argc; i++) {
        if (sscanf(argv[i], "%d:%lld", &ordinal, &mib) != 2) return 91;
        if (cuDeviceGet(&dev, ordinal)) return 92;
        r = cuCtxCreate_v2(&ctx, 0, dev);
        printf("%d\n", (int)(r ? r : cuMemAlloc_v2(&p, (size_t)mib << 20)));
    }
    return 0;
}
"""
)


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.skip("needs root (a private mount namespace)")
    return build_workload(tmp_path_factory.mktemp("workload"), WORKLOAD,
                          also=("build/tests/test_limits_file",))  # fmt: skip


@pytest.fixture
def dirs() -> Iterator[AgentDirs]:
    with agent_dirs() as made:
        yield made


def prepare(agent: Any, api: FakeApi, name: str, *shares: tuple[str, str]) -> str:
    """A claim of `shares` ((device, memory) each) prepared by the agent; its uid."""
    uid = str(uuid.uuid4())
    results = [result(d, memory=m, cores="50", share_id=str(uuid.uuid4())) for d, m in shares]
    with api.lock:
        api.claims[name] = allocated_claim(*results, uid=uid, name=name, node=NODE)
    answer = agent.prepare([dra_v1_pb2.Claim(namespace="team-a", name=name, uid=uid)])
    assert answer[uid].error == "", answer[uid].error
    return uid


def container_env(dirs: AgentDirs, *uids: str) -> dict[str, str]:
    """The environment the runtime gives a container from the claims' CDI specs (the later
    spec's value of a repeated name), libvgpu preloaded over the fake driver."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "LD_", "NVIDIA_"))}
    for uid in uids:
        spec = json.loads((dirs.cdi / f"k8s.{DEFAULT.driver}-claim_{uid}.json").read_text())
        edits = [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"])]
        env.update(entry.split("=", 1) for e in edits for entry in e["env"])
    env["LD_PRELOAD"] = str(NATIVE / "build" / "libvgpu.so")
    env["LD_LIBRARY_PATH"] = str(NATIVE / "build" / "fake")
    return env


def run_contained(
    workload: Path, dirs: AgentDirs, limits_of: str, env: dict[str, str], *allocs: str
) -> tuple[list[int], str]:
    """The workload with `limits_of`'s limits file at libvgpu's path (its region path made the
    host dir the CDI mount would show there); the CUresult of each allocation, and stderr."""
    text = (dirs.vgpu / "limits" / f"{limits_of}.conf").read_text()
    mounted = dirs.base / f"mounted-{limits_of}.conf"
    mounted.write_text(text.replace(CONTAINER_SHARED_DIR, str(dirs.claim_dir(limits_of))))
    runner = NATIVE / "build" / "tests" / "test_limits_file"
    done = subprocess.run(
        [str(runner), "contain", str(mounted), str(workload), *allocs],
        env={**env, "TEST_TMP": str(dirs.base)},  # its /etc overlay goes with the test's dirs
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [int(line) for line in done.stdout.split()], done.stderr


def test_a_reordered_cuda_visible_devices_does_not_move_a_limit_to_another_card(
    workload: Path, dirs: AgentDirs, api: FakeApi
) -> None:
    """4 GiB on the first card, 1 GiB on the second; the tenant asks for CUDA_VISIBLE_DEVICES=1,0.
    Ordinal 0 is then the 1 GiB card and keeps 1 GiB (by HAMi's ordinal keys it would get 4)."""
    with running_agent(dirs, api, mock_gpus=MOCK_GPUS) as agent:
        uid = prepare(agent, api, "two-cards", ("gpu-0", "4096Mi"), ("gpu-1", "1024Mi"))
        env = container_env(dirs, uid)
        assert env["NVIDIA_VISIBLE_DEVICES"] == f"{UUID_0},{UUID_1}"
        codes, stderr = run_contained(
            workload, dirs, uid, {**env, "CUDA_VISIBLE_DEVICES": "1,0"},
            "0:2048", "0:768", "1:3072", "1:2048",
        )  # fmt: skip
    assert codes == [OUT_OF_MEMORY, OK, OK, OUT_OF_MEMORY], stderr


@pytest.mark.parametrize("mounted", ["first", "second"])
def test_the_gpu_of_a_claim_whose_limits_did_not_reach_the_container_gets_nothing(
    workload: Path, dirs: AgentDirs, api: FakeApi, mounted: str
) -> None:
    """Two claims' GPUs in one container, one limits file at the one path (whichever claim's
    mount won): the other claim's GPU gets no memory, never the whole card."""
    with running_agent(dirs, api, mock_gpus=MOCK_GPUS) as agent:
        first = prepare(agent, api, "first", ("gpu-0", "1024Mi"))
        second = prepare(agent, api, "second", ("gpu-1", "2048Mi"))
        env = {**container_env(dirs, first, second), "NVIDIA_VISIBLE_DEVICES": f"{UUID_0},{UUID_1}"}
        limits_of = first if mounted == "first" else second
        codes, stderr = run_contained(workload, dirs, limits_of, env, "0:512", "1:512", "1:8192")
    if mounted == "first":
        assert codes == [OK, INVALID_DEVICE, INVALID_DEVICE], stderr
        assert f"({UUID_1}) is not in /etc/vgpu-bridge/limits.conf" in stderr
    else:
        assert codes == [INVALID_DEVICE, OK, OUT_OF_MEMORY], stderr
        assert f"({UUID_0}) is not in /etc/vgpu-bridge/limits.conf" in stderr


def test_a_pod_whose_container_names_two_claims_of_our_class_is_refused(
    webhook: Webhook, api: FakeApi
) -> None:
    ours = {"name": "g", "exactly": {"deviceClassName": DEFAULT.device_class}}
    names = ("two-claims-big", "two-claims-small")
    with api.lock:
        for name in names:
            api.claims[name] = {"spec": {"devices": {"requests": [ours]}}}
    container = {"name": "main", "image": "cuda:12",
                 "resources": {"claims": [{"name": "a"}, {"name": "b"}]}}  # fmt: skip
    claims = [
        {"name": "a", "resourceClaimName": names[0]},
        {"name": "b", "resourceClaimName": names[1]},
    ]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [container], "resourceClaims": claims}}  # fmt: skip
    client = Client(webhook)
    try:
        status, data, _ = client.post(json.dumps(review(pod)).encode(), "application/json")
    finally:
        client.close()
        with api.lock:
            for name in names:
                del api.claims[name]
    assert status == 200, data[:300]
    response = json.loads(data)["response"]
    assert response["allowed"] is False, response
    assert (
        "spec.containers[0].resources.claims: container 'main' names 2 claims of class "
        f"{DEFAULT.device_class} (ResourceClaim {names[0]}, ResourceClaim {names[1]})"
    ) in response["status"]["message"]
