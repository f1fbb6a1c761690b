"""Write tests/fixtures/ondisk/<commit>/: what one release leaves on a node's disk, written by that
release's own code, for the tests that read it with today's (tests/unit/test_ondisk_fixtures.py,
native/vgpu/tests/test_ondisk.c).

    python scripts/ondisk_fixtures.py               # the previous release (PREVIOUS_RELEASE)
    python scripts/ondisk_fixtures.py --commit C    # another release
    python scripts/ondisk_fixtures.py --force       # replace a fixture (never done silently)

Containers started under release N keep running while the agent becomes N+1 (and back, after a
downgrade): libvgpu of N, loaded in them, reads the limits file and the shared region the next
agent keeps; that agent reads N's checkpoint, claim dirs, host-pids files and priority boards.
So the fixture is made by N itself: its tree is taken from git (`git archive C`, never the working
tree), its agent (`DeviceState`, run by this script with that tree first on the import path, over
an API in a dict) prepares two claims of mock GPUs, and its libvgpu (built from that tree, over
its fake driver, with the claim's CDI environment) creates the claim's region and the node's
priority board. Nothing is typed by hand but the ResourceClaims the API would hold.

The fixture is committed and never regenerated silently: a change to a format is a new version
with an upgrade (docs/upgrade.md), and the fixture of the release before it stays as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "ondisk"
PREVIOUS_RELEASE = "fdf5730"  # e2e/kind/releases.py names the same commit
# Where the release's agent writes: its CDI specs carry these host paths, so they must not depend
# on a temporary name (a second run writes the same specs).
WORK = Path("/tmp/vgpu-bridge-ondisk")
DRIVER = "gpu.vgpu-bridge.io"
NODE = "node-a"
# the fake driver's cards (native/vgpu/tests/fake/fake.h): libvgpu over it sees these UUIDs
GPU_UUIDS = ("GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae00", "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae01")
GPU_MEMORY = 16 * 2**30  # the fake driver's default
CLAIM_A = "0c1a1d00-0000-4000-8000-00000000000a"  # one share, priority 0: the region's claim
CLAIM_B = "0c1a1d00-0000-4000-8000-00000000000b"  # a share on each card, no priority
CLAIM_E = "0c1a1d00-0000-4000-8000-00000000000e"  # enforcer mode: NVIDIA's card, our limits
HOST_PIDS = {(1, 4242): 98765}  # (pid in the container, start time) -> host pid
NATIVE_TARGETS = ("build/libvgpu.so", "build/fake/libcuda.so.1", "build/fake/libnvidia-ml.so.1",
                  "build/gpu_check")  # fmt: skip


def _result(device: str, memory: str, cores: str, share: str) -> dict[str, Any]:
    return {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device, "shareID": share,
            "consumedCapacity": {"memory": memory, "cores": cores}}  # fmt: skip


def _claim(uid: str, name: str, results: list[dict[str, Any]], priority: int | None) -> Any:
    """A ResourceClaim allocated on NODE as the API server returns it."""
    devices: dict[str, Any] = {"results": results}
    if priority is not None:
        parameters = {"apiVersion": "gpu.vgpu-bridge.io/v1alpha1", "kind": "GpuShareConfig",
                      "priority": priority}  # fmt: skip
        devices["config"] = [{"source": "FromClaim", "requests": ["gpu"],
                              "opaque": {"driver": DRIVER, "parameters": parameters}}]  # fmt: skip
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {"allocation": {"devices": devices},
                   "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": uid}]},
    }  # fmt: skip


CLAIMS = [
    _claim(CLAIM_A, "train-gpu", [_result("gpu-0", "3000Mi", "30",
                                          "7c6c2d7e-0000-4000-8000-00000000000a")], 0),
    _claim(CLAIM_B, "serve-gpu", [
        _result("gpu-0", "1Gi", "20", "7c6c2d7e-0000-4000-8000-0000000000b0"),
        _result("gpu-1", "2Gi", "0", "7c6c2d7e-0000-4000-8000-0000000000b1"),
    ], None),
]  # fmt: skip


def agent_side(work: Path) -> None:
    """Run with the release's tree first on the import path: its agent prepares CLAIMS on a
    node of ours (`work/node`) and ENFORCED on a node in enforcer mode (`work/enforcer-node`),
    each writing what it answered beside (prepared.json) and, for CLAIM_A, a host-pids file."""
    import vgpu_bridge

    tree = Path(os.environ["ONDISK_TREE"])
    assert Path(vgpu_bridge.__file__).is_relative_to(tree), vgpu_bridge.__file__
    from tests.unit.node import nvidia_claims
    from vgpu_bridge.atomic_files import write_atomic
    from vgpu_bridge.core import DEFAULT
    from vgpu_bridge.core.profiles import ENFORCER_DRIVER, our_profile
    from vgpu_bridge.node import hostpids
    from vgpu_bridge.node.cdi import claim_dir
    from vgpu_bridge.node.gpus import Gpu
    from vgpu_bridge.node.nvidia_slices import NvidiaCards

    gpus = [Gpu(index=i, uuid=uuid, product_name="NVIDIA Fake GPU", memory=GPU_MEMORY, minor=i)
            for i, uuid in enumerate(GPU_UUIDS)]  # fmt: skip
    assert DEFAULT.driver == DRIVER
    (work / "formats.json").write_text(json.dumps(formats(), indent=2, sort_keys=True) + "\n")
    prepare(work / "node", CLAIMS, profile=DEFAULT, gpus=gpus)
    write_atomic(claim_dir(work / "node" / "vgpu", CLAIM_A) / hostpids.FILE,
                 hostpids.format_host_pids(HOST_PIDS), durable=False)  # fmt: skip
    enforced = enforced_claims(nvidia_claims)
    slices = [nvidia_claims.nvidia_slice()]
    cards = NvidiaCards(lambda: [{"spec": s["spec"]} for s in slices], node=NODE)
    prepare(work / "enforcer-node", enforced, profile=our_profile(ENFORCER_DRIVER), gpus=[],
            nvidia_cards=cards)  # fmt: skip


def formats() -> dict[str, Any]:
    """The version of each format, as the `vgpu_bridge` on the import path writes and reads it,
    and the checkpoint's fields (a field added or changed under the same version is a file the
    release before cannot read: its model forbids what it does not know)."""
    from vgpu_bridge.node import cdi, checkpoint, claimdirs, hostpids, region

    def fields(model: Any) -> dict[str, str]:
        return {name: f"{field.annotation}" + ("" if field.is_required() else " (optional)")
                for name, field in model.model_fields.items()}  # fmt: skip

    return {
        "checkpoint": checkpoint.VERSION,
        "checkpointFields": {
            "PreparedClaim": fields(checkpoint.PreparedClaim),
            "PreparedDevice": fields(checkpoint.PreparedDevice),
        },
        "limitsHeader": cdi.LIMITS_HEADER,
        "hostPidsHeader": hostpids.HEADER,
        "regionVersion": region.REGION_VERSION,
        "regionSize": region.REGION_SIZE,
        "boardSize": claimdirs.BOARD_SIZE,
    }


def enforced_claims(helpers: Any) -> list[Any]:
    """A claim of NVIDIA's card gpu-1 with our enforcer beside (30% SM, priority 1), shaped by the
    release's own helpers (tests/unit/node/nvidia_claims.py of that tree)."""
    results = [helpers.nvidia_result("gpu-1", memory="2Gi", shares="30"),
               helpers.enforcer_result()]  # fmt: skip
    config = [helpers.enforcer_config(cores=30, priority=1)]
    return [helpers.nvidia_claim(*results, uid=CLAIM_E, name="infer-gpu", config=config)]


def prepare(root: Path, claims: list[Any], **agent: Any) -> None:
    """The release's agent, over an API holding `claims`, prepares them all under `root`."""
    from kubernetes import client

    from vgpu_bridge.core.profiles import DriverProfile
    from vgpu_bridge.kube import KubeApi
    from vgpu_bridge.node.cdi import CdiLayout
    from vgpu_bridge.node.state import ClaimRef, DeviceState, answered

    by_path = {f"/apis/resource.k8s.io/v1/namespaces/{c['metadata']['namespace']}/"
               f"resourceclaims/{c['metadata']['name']}": c for c in claims}  # fmt: skip

    class ClaimsApi(KubeApi):
        def get(self, path: str) -> Any:
            return json.loads(json.dumps(by_path[path]))

    profile: DriverProfile = agent["profile"]
    layout = CdiLayout(cdi_dir=root / "cdi", vgpu_dir=root / "vgpu", driver=profile.driver,
                       enforcer=agent.get("nvidia_cards") is not None)  # fmt: skip
    state = DeviceState(ClaimsApi(client.ApiClient(client.Configuration())), node=NODE,
                        layout=layout, checkpoint_file=root / "plugin" / "checkpoint.json",
                        **agent)  # fmt: skip
    state.start()
    refs = [ClaimRef(c["metadata"]["namespace"], c["metadata"]["name"], c["metadata"]["uid"])
            for c in claims]  # fmt: skip
    results = state.prepare(refs)
    assert all(r.error is None for r in results.values()), results
    answers = {uid: [d.model_dump(mode="json") for d in answered(r.devices)]
               for uid, r in results.items()}  # fmt: skip
    (root / "prepared.json").write_text(json.dumps(answers, indent=2, sort_keys=True) + "\n")
    (root / "claims.json").write_text(json.dumps(claims, indent=2) + "\n")
    state.close()
    (root / "plugin" / "agent.lock").unlink()  # the lock's file, not a format


def libvgpu_side(work: Path, native: Path) -> None:
    """CLAIM_A's container under the release's libvgpu (its CDI environment, the fake driver):
    one allocation refused over the limit, one that fits, launches at priority 0. What stays is
    its region (the device, its limits, the refusal; no live process) and the card's board."""
    node = work / "node"
    spec = json.loads((node / "cdi" / f"k8s.{DRIVER}-claim_{CLAIM_A}.json").read_text())
    env = dict(os.environ, LD_LIBRARY_PATH=str(native / "build" / "fake"),
               LD_PRELOAD=str(native / "build" / "libvgpu.so"))  # fmt: skip
    for edits in [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"])]:
        env.update(entry.split("=", 1) for entry in edits.get("env", []))
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(node / "vgpu" / "claims" / CLAIM_A / "vgpu.cache")
    env["CUDA_TASK_PRIORITY_DIR"] = str(node / "vgpu" / "priority")
    check = str(native / "build" / "gpu_check")
    over, fits = str(3001 * 2**20), str(1000 * 2**20)
    for argv, status in (([check, "alloc", over], 2), ([check, "alloc", fits], 0),
                         ([check, "launch", "100"], 0)):  # fmt: skip
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        if done.returncode != status:
            sys.exit(f"{' '.join(argv)}: exit {done.returncode}, wanted {status}\n{done.stderr}")


def modes(top: Path) -> dict[str, str]:
    """Every path's mode (octal) by relative path, a directory's with a trailing slash: git
    keeps neither the modes, which the agent checks, nor empty directories."""
    found = {}
    for path in sorted(top.rglob("*")):
        if path.name in ("prepared.json", "claims.json", "formats.json"):
            continue
        slash = "/" if path.is_dir() else ""
        found[f"{path.relative_to(top)}{slash}"] = oct(path.lstat().st_mode & 0o7777)
    return found


def _revision(commit: str) -> str:
    """The commit's full name: a short one could come to name two."""
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{commit}^{{commit}}"],
                          check=True, capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip()


def release_tree(commit: str, tree: Path) -> Path:
    """The release's agent and libvgpu, from git, into `tree`; its native dir, built."""
    paths = ["vgpu_bridge", "native/vgpu", "tests", "e2e"]  # tests, e2e: the NVIDIA shapes
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, *paths],
                             check=True, capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    native = tree / "native" / "vgpu"
    subprocess.run(["make", "-C", str(native), "-s", *NATIVE_TARGETS], check=True)
    return native


def release_node(commit: str, tree: Path, native: Path) -> Path:
    """The node's files as the release leaves them, under WORK/<commit>."""
    work = WORK / commit
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(tree), ONDISK_TREE=str(tree))
    subprocess.run([sys.executable, "-P", str(Path(__file__).resolve()), "--agent-side",
                    str(work)], env=env, cwd=tree, check=True)  # fmt: skip
    libvgpu_side(work, native)
    return work


def describe(commit: str, work: Path) -> dict[str, Any]:
    return {
        "commit": commit,
        "revision": _revision(commit),
        "work": str(work),
        "claims": {"node": [CLAIM_A, CLAIM_B], "enforcer-node": [CLAIM_E]},
        "gpus": list(GPU_UUIDS),
        "hostPids": [[*key, host] for key, host in HOST_PIDS.items()],
        "command": f"python scripts/ondisk_fixtures.py --commit {commit}",
    }


def generate(commit: str, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="ondisk-tree-") as scratch:
        tree = Path(scratch)
        work = release_node(commit, tree, release_tree(commit, tree))
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(work, out, symlinks=True)
    (out / "modes.json").write_text(json.dumps(modes(work), indent=2) + "\n")
    (out / "release.json").write_text(json.dumps(describe(commit, work), indent=2) + "\n")
    shutil.rmtree(work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", default=PREVIOUS_RELEASE)
    parser.add_argument("--force", action="store_true", help="replace an existing fixture")
    parser.add_argument("--agent-side", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.agent_side is not None:
        agent_side(args.agent_side)
        return 0
    out = FIXTURES / args.commit
    if out.exists() and not args.force:
        print(f"{out} exists: fixtures are not regenerated silently (--force)", file=sys.stderr)
        return 1
    generate(args.commit, out)
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
