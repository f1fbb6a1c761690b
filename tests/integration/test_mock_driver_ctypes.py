"""The stand-in CUDA driver a container on a mock card gets (native/vgpu's `make mock-driver`: the
fake libcuda/libnvidia-ml laid out as a driver install) holds a Python process that only has
ctypes to its share, with the real libvgpu preloaded.

The process is examples/kind-e2e/cuda_share_probe.py, the script the kind example suite runs in
its pod. It sees the libraries as a CDI spec gives them (each at its SONAME, from the agent's own
driver-root discovery of the layout) and its limits as the agent gives them: the limits file at
libvgpu's compiled-in path (in a private mount namespace; needs root) or, as HAMi-style tools
read them, the spec's per-ordinal environment. ctypes finds every function by dlsym(handle,
name): a share that holds proves libvgpu answers that path, since the fake card has 80 GiB.
Last, the whole chain without kind: the agent with a mock label's card and `--mock-driver` plans
a claim, and its CDI spec, applied to the probe (mounts as links and paths, env, limits file),
holds it to the share and presents the label's card.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from tests.native_workload import NATIVE
from tests.unit.node.agent_settings import agent_settings
from tests.unit.node.claims import NODE, UID, allocated_claim, result
from tests.unit.node.fake_api import FakeApi
from vgpu_bridge.node.app import build, mock_driver_gpus
from vgpu_bridge.node.cdi import LIMITS_MOUNT, limits_text
from vgpu_bridge.node.driver_root import DriverStack, discover
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.mock_cards import parse_label
from vgpu_bridge.node.state import ClaimRef

PROBE = Path(__file__).resolve().parents[2] / "examples" / "kind-e2e" / "cuda_share_probe.py"
LAYOUT = NATIVE / "build" / "mock-driver"
LIBVGPU = NATIVE / "build" / "libvgpu.so"
UUID = "GPU-6d6f636b-0000-4000-8000-000000000001"
SHARE_MIB = 4096
SHARE = SHARE_MIB << 20
CARD = "80G"
PAST = 1 << 20  # one MiB more than is free
#: the claim's environment, as the agent's CDI spec sets it for one 4 GiB share of the card
SPEC: dict[str, Any] = {
    "containerEdits": {"env": [f"NVIDIA_VISIBLE_DEVICES={UUID}"]},
    "devices": [
        {
            "name": "gpu-0",
            "containerEdits": {
                "env": [f"CUDA_DEVICE_MEMORY_LIMIT_0={SHARE_MIB}m", "CUDA_DEVICE_SM_LIMIT_0=0"]
            },
        }
    ],
}


def _driver_version() -> str:
    header = (NATIVE / "tests" / "fake" / "fake.h").read_text()
    found = re.search(r'^#define FAKE_DRIVER_VERSION "([0-9.]+)"', header, re.MULTILINE)
    assert found, "fake.h names no FAKE_DRIVER_VERSION"
    return found.group(1)


@pytest.fixture(scope="module")
def stack() -> DriverStack:
    """The layout, built by native/vgpu's Makefile, as the agent's driver-root discovery sees it."""
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("needs make and a C compiler to build native/vgpu")
    subprocess.run(["make", "-s", "-C", str(NATIVE), "build/libvgpu.so", "mock-driver"], check=True)
    return discover(
        root=LAYOUT, mount=LAYOUT, version=_driver_version(), machine=platform.machine()
    )


@pytest.fixture(scope="module")
def container_libs(stack: DriverStack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The container's library dir as the spec's mounts make it (a link per mount here)."""
    libs = tmp_path_factory.mktemp("container") / stack.container_library_dirs[0].lstrip("/")
    libs.mkdir(parents=True)
    for host, container in stack.file_mounts():
        path = PurePosixPath(container)
        if str(path.parent) == stack.container_library_dirs[0]:
            (libs / path.name).symlink_to(host)
    return libs


def _spec_env() -> dict[str, str]:
    edits = [SPEC["containerEdits"], *(d["containerEdits"] for d in SPEC["devices"])]
    return dict(str(e).split("=", 1) for edit in edits for e in edit["env"])


def _probe(
    libs: Path,
    *,
    env: dict[str, str],
    wrapper: Sequence[str] = (),
    preload: bool = True,
    card: str | None = CARD,
) -> dict[str, Any]:
    """The probe's report, run with `env` (and the card's memory for the fake, unless the env
    says it) over the libraries in `libs`, libvgpu preloaded, under `wrapper`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "LD_", "FAKE_"))}
    base.pop("NVIDIA_VISIBLE_DEVICES", None)
    child = {**base, **env, "LD_LIBRARY_PATH": str(libs)}
    if card is not None:
        child["FAKE_CUDA_MEMORY"] = card
    if preload:
        child["LD_PRELOAD"] = str(LIBVGPU)
    command = [*wrapper, sys.executable, str(PROBE), str(PAST)]
    done = subprocess.run(command, env=child, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout + done.stderr
    seen: dict[str, Any] = json.loads(lines[0])
    return seen


def _in_private_etc(limits: str, scratch: Path) -> list[str]:
    """A command prefix: a private mount namespace whose /etc has the limits file at libvgpu's
    path (an overlay of /etc, its upper layer on a tmpfs of its own), as the spec mounts it."""
    script = (
        'set -e; mount -t tmpfs tmpfs "$0"; mkdir -p "$0/upper${1%/*}" "$0/work"; '
        'printf %s "$2" > "$0/upper$1"; chmod 0444 "$0/upper$1"; '
        'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$0/upper/etc,workdir=$0/work" /etc; '
        'shift 3; exec "$@"'
    )
    return ["unshare", "--mount", "sh", "-c", script, str(scratch), LIMITS_MOUNT, limits, "--"]


def _can_use_private_etc(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    tmp_path.mkdir()
    probe = [*_in_private_etc("x", tmp_path), "true"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


@pytest.fixture(params=["limits-file", "environment"])
def limits(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """How the process gets its limits: env (always the spec's) and a command prefix."""
    env = _spec_env()
    if request.param == "environment":
        yield {"env": env, "wrapper": []}
        return
    if not _can_use_private_etc(tmp_path / "check"):
        pytest.skip("needs root and unshare --mount with overlayfs for libvgpu's limits file")
    env = {k: v for k, v in env.items() if not k.startswith("CUDA_DEVICE_")}  # the file alone
    (tmp_path / "scratch").mkdir()
    yield {"env": env, "wrapper": _in_private_etc(limits_text(SPEC), tmp_path / "scratch")}


def test_the_layout_is_a_driver_install_whose_libraries_load_at_their_sonames(
    stack: DriverStack,
) -> None:
    sonames = {library.name: library.soname for library in stack.libraries}
    assert sonames == {"libcuda": "libcuda.so.1", "libnvidia-ml": "libnvidia-ml.so.1"}
    for library in stack.libraries:
        path = LAYOUT / library.path
        assert path.is_file()
        assert not path.is_symlink()
        assert path.name == f"{library.name}.so.{stack.version}"
    assert stack.passed_over == ()


def test_a_ctypes_process_on_the_stand_in_driver_is_held_to_its_share(
    stack: DriverStack, container_libs: Path, limits: dict[str, Any]
) -> None:
    seen = _probe(container_libs, env=limits["env"], wrapper=limits["wrapper"])
    assert seen["error"] is None, seen
    assert (seen["cuInit"], seen["ctx"]) == (0, 0), seen
    assert seen["total"] == SHARE, seen
    assert seen["within"] == {"bytes": SHARE // 2, "result": 0}, seen
    assert seen["free_after"] == SHARE - SHARE // 2, seen
    assert seen["past"]["result"] == 2, seen  # CUDA_ERROR_OUT_OF_MEMORY
    nvml = seen["nvml"]
    assert (nvml["init"], nvml["total"], nvml["used"]) == (0, SHARE, SHARE // 2), seen
    assert nvml["uuid"] == UUID
    assert nvml["driver_version"] == stack.version  # the layout's file names are NVML's answer


def test_without_libvgpu_the_stand_in_driver_is_the_whole_card(container_libs: Path) -> None:
    """The control: the fake alone grants ten times the share, so the refusal above is libvgpu's
    (past the whole card the fake refuses by itself)."""
    seen = _probe(container_libs, env=_spec_env(), preload=False)
    assert seen["total"] == 80 << 30, seen
    assert seen["within"] == {"bytes": 40 << 30, "result": 0}, seen
    assert seen["past"]["result"] == 2, seen
    assert seen["nvml"]["total"] == 80 << 30, seen


@pytest.fixture
def agents_spec(stack: DriverStack, tmp_path: Path) -> tuple[Gpu, dict[str, Any]]:
    """The agent's spec for a 4 GiB share of the first card of `1xh100-80gb`, with the stand-in
    driver copied from the layout under its vgpu dir, as `--mock-driver` does."""
    label = "vgpu-bridge.io/mock-gpus"
    settings = agent_settings(tmp_path, device_health=False, mock_gpus_node_label=label,
                              mock_driver=str(LAYOUT))  # fmt: skip
    cards = parse_label("1xh100-80gb", node=NODE, label=label)
    (card,) = mock_driver_gpus(LAYOUT, settings.vgpu_dir, cards)
    agent = build(settings, FakeApi(), gpus=(card,))
    claim = allocated_claim(result(card.device_name, memory=f"{SHARE_MIB}Mi", cores="0"))
    plan = agent.state.plan(claim, ClaimRef(namespace="team-a", name="share", uid=UID))
    spec: dict[str, Any] = json.loads(plan.cdi_spec)
    return card, spec


def _applied(spec: dict[str, Any], container: Path, scratch: Path) -> dict[str, Any]:
    """What a runtime makes of the spec, for a process of this machine: each library mount a
    link in the container's library dir, the limits file at its path in a private /etc, and the
    other mounts' container paths, in the env and the limits file, replaced by their host paths
    (dirs made)."""
    edits = [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"])]
    env = dict(str(e).split("=", 1) for edit in edits for e in edit.get("env", []))
    mounts = {m["containerPath"]: m["hostPath"] for e in edits for m in e.get("mounts", [])}
    limits = limits_text(spec)
    libs = container / "lib"
    libs.mkdir(parents=True)
    for inside, host in mounts.items():
        if inside.startswith("/usr/lib/") and "/libvgpu" not in inside:
            (libs / PurePosixPath(inside).name).symlink_to(host)
        elif inside not in (LIMITS_MOUNT, "/etc/ld.so.preload") and "." not in inside:
            Path(host).mkdir(parents=True, exist_ok=True)
            env = {k: v.replace(inside, host) for k, v in env.items()}
            limits = limits.replace(f"={inside}/", f"={host}/")
    return {"env": env, "libs": libs, "wrapper": _in_private_etc(limits, scratch)}


def test_the_agents_spec_for_a_mock_card_holds_a_ctypes_process_to_its_share(
    agents_spec: tuple[Gpu, dict[str, Any]], tmp_path: Path
) -> None:
    if not _can_use_private_etc(tmp_path / "check"):
        pytest.skip("needs root and unshare --mount with overlayfs for libvgpu's limits file")
    card, spec = agents_spec
    (tmp_path / "scratch").mkdir()
    applied = _applied(spec, tmp_path / "container", tmp_path / "scratch")
    env = {k: v for k, v in applied["env"].items() if not k.startswith("CUDA_DEVICE_")}
    seen = _probe(applied["libs"], env=env, wrapper=applied["wrapper"], card=None)
    assert seen["error"] is None, seen
    assert (seen["total"], seen["nvml"]["total"]) == (SHARE, SHARE), seen
    assert seen["within"]["result"] == 0, seen
    assert seen["past"]["result"] == 2, seen
    nvml = seen["nvml"]
    assert (nvml["uuid"], nvml["name"]) == (card.uuid, card.product_name)
    assert nvml["driver_version"] == card.driver_version


def test_the_agents_spec_for_a_mock_card_presents_the_cards_memory(
    agents_spec: tuple[Gpu, dict[str, Any]], tmp_path: Path
) -> None:
    """Without libvgpu, what the spec's settings make of the fake: the label's card, whole."""
    card, spec = agents_spec
    (tmp_path / "scratch").mkdir()
    applied = _applied(spec, tmp_path / "container", tmp_path / "scratch")
    seen = _probe(applied["libs"], env=applied["env"], preload=False, card=None)
    assert seen["total"] == card.memory == 80 << 30, seen
