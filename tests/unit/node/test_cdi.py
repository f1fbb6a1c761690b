"""CDI specs: exactly the shares, in order, with libvgpu's env and mounts; written atomically."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.node.claims import BY_NAME, NODE, allocated_claim, result
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.allocation import ClaimShares, claim_shares
from vgpu_bridge.node.cdi import (
    CONTAINER_PRIORITY_DIR,
    LIMITS_MOUNT,
    CdiLayout,
    build_spec,
    limits_text,
    remove_spec,
    spec_is_current,
    spec_text,
    write_spec,
)
from vgpu_bridge.node.gpus import Gpu

UID = "8f1d0000-0000-4000-8000-0000000000aa"
PRIO_UID = "0c1a1d00-0000-4000-8000-0000000000bb"
GOLDEN = Path(__file__).resolve().parents[2] / "data" / "node" / "cdi"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
LAYOUT = CdiLayout(
    cdi_dir=Path("/var/run/cdi"), vgpu_dir=Path("/usr/local/vgpu"), driver=DEFAULT.driver
)


def _two_shares(gpus: Mapping[str, Gpu] = BY_NAME) -> ClaimShares:
    claim = allocated_claim(
        result("gpu-1", memory="3000Mi", cores="30"),
        result("gpu-0", memory="1Gi", cores="0", share_id="7c6c2d7e-0000-4000-8000-000000000002"),
        uid=UID,
        priority=0,
    )
    return claim_shares(claim, uid=UID, node=NODE, profile=DEFAULT, gpus=gpus)


@pytest.mark.parametrize("real", [False, True], ids=["mock-gpus", "real-gpus"])
def test_spec_golden(real: bool) -> None:
    gpus = {n: replace(g, minor=g.index + 2) for n, g in BY_NAME.items()} if real else BY_NAME
    spec = build_spec(_two_shares(gpus), LAYOUT)
    actual = json.dumps(spec, indent=2, sort_keys=True) + "\n"
    golden = GOLDEN / f"two-shares-{'real' if real else 'mock'}.json"
    if UPDATE:
        golden.write_text(actual)
    assert actual == golden.read_text()


def test_share_i_carries_its_own_limits_and_the_first_share_sets_the_legacy_sm_limit() -> None:
    spec = build_spec(_two_shares(), LAYOUT)
    assert [d["containerEdits"]["env"] for d in spec["devices"]] == [
        ["CUDA_DEVICE_MEMORY_LIMIT_0=3000m", "CUDA_DEVICE_SM_LIMIT_0=30"],
        ["CUDA_DEVICE_MEMORY_LIMIT_1=1024m", "CUDA_DEVICE_SM_LIMIT_1=0"],
    ]
    env = spec["containerEdits"]["env"]
    assert "NVIDIA_VISIBLE_DEVICES=GPU-bbbb,GPU-aaaa" in env
    assert "CUDA_DEVICE_SM_LIMIT=30" in env
    assert "CUDA_TASK_PRIORITY=0" in env
    assert LAYOUT.device_id(UID, 1) == f"k8s.gpu.vgpu-bridge.io/claim={UID}-1"


@pytest.mark.parametrize("priority", [0, 1, None], ids=["high", "low", "unset"])
def test_every_claimed_container_mounts_the_node_priority_dir_read_write(
    priority: int | None,
) -> None:
    claim = allocated_claim(result("gpu-0"), uid=PRIO_UID, priority=priority)
    shares = claim_shares(claim, uid=PRIO_UID, node=NODE, profile=DEFAULT, gpus=BY_NAME)
    edits = build_spec(shares, LAYOUT)["containerEdits"]
    assert "CUDA_TASK_PRIORITY_DIR=/usr/local/vgpu/priority" in edits["env"]
    assert {
        "hostPath": "/usr/local/vgpu/priority",
        "containerPath": CONTAINER_PRIORITY_DIR,
        "options": ["rw", "nosuid", "nodev", "bind"],
    } in edits["mounts"]


def test_write_creates_the_priority_dir_1777_whatever_the_umask_and_remove_keeps_it(
    tmp_path: Path,
) -> None:
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    layout.cdi_dir.mkdir()
    text = spec_text(build_spec(_two_shares(), layout))
    old = os.umask(0o077)
    try:
        write_spec(text, UID, layout)
    finally:
        os.umask(old)
    assert layout.priority_dir == tmp_path / "vgpu" / "priority"
    assert layout.priority_dir.stat().st_mode & 0o7777 == 0o1777
    layout.priority_dir.rmdir()  # gone (say, vgpu dir wiped): the spec is not current any more
    assert not spec_is_current(text, UID, layout)
    write_spec(text, UID, layout)
    assert spec_is_current(text, UID, layout)
    (layout.priority_dir / "GPU-aaaa.board").write_bytes(b"")  # a board a container made
    remove_spec(UID, layout)
    assert (layout.priority_dir / "GPU-aaaa.board").exists()  # shared by every claim: kept


def test_write_makes_the_shared_region_dir_0777_for_any_container_user_whatever_the_umask(
    tmp_path: Path,
) -> None:
    """A container running as another user than root creates the region file there; not sticky,
    so fs.protected_regular lets the claim's other containers open that file with O_CREAT."""
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    layout.cdi_dir.mkdir()
    text = spec_text(build_spec(_two_shares(), layout))
    old = os.umask(0o077)
    try:
        write_spec(text, UID, layout)
    finally:
        os.umask(old)
    assert layout.shared_dir(UID).stat().st_mode & 0o7777 == 0o777
    layout.shared_dir(UID).chmod(0o755)  # as an older agent left it: not current
    assert not spec_is_current(text, UID, layout)
    write_spec(text, UID, layout)
    assert layout.shared_dir(UID).stat().st_mode & 0o7777 == 0o777
    assert spec_is_current(text, UID, layout)


def test_write_is_atomic_and_remove_takes_spec_and_limits_but_leaves_the_tenants_dir(
    tmp_path: Path,
) -> None:
    """The claim's dir is the tenant's to fill: the state moves it to the trash, outside its
    lock (test_claimdirs); remove_spec takes only what the agent wrote."""
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    layout.cdi_dir.mkdir()
    spec = build_spec(_two_shares(), layout)
    write_spec(spec_text(spec), UID, layout)
    assert [p.name for p in layout.cdi_dir.iterdir()] == [
        f"k8s.gpu.vgpu-bridge.io-claim_{UID}.json"
    ]
    assert [p.name for p in layout.limits_dir.iterdir()] == [f"{UID}.conf"]
    assert spec_is_current(spec_text(spec), UID, layout)
    assert layout.shared_dir(UID).is_dir()
    remove_spec(UID, layout)
    remove_spec(UID, layout)  # again: nothing left to remove is fine
    assert not any(layout.cdi_dir.iterdir())
    assert not any(layout.limits_dir.iterdir())
    assert layout.shared_dir(UID).is_dir()


def test_the_limits_file_keys_each_gpus_limits_by_its_uuid() -> None:
    """Issue #25 item 2: by UUID, not by share index, so no CUDA ordinal order (the tenant's
    CUDA_VISIBLE_DEVICES, CUDA's own enumeration) can hand one share's limit to another card."""
    spec = build_spec(_two_shares(), LAYOUT)
    assert limits_text(spec) == (
        "vgpu-bridge-limits 2\n"
        "CUDA_DEVICE_MEMORY_LIMIT_GPU-bbbb=3000m\n"
        "CUDA_DEVICE_SM_LIMIT_GPU-bbbb=30\n"
        "CUDA_DEVICE_MEMORY_LIMIT_GPU-aaaa=1024m\n"
        "CUDA_DEVICE_SM_LIMIT_GPU-aaaa=0\n"
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/shared/vgpu.cache\n"
        "CUDA_TASK_PRIORITY=0\n"
    )
    mount = next(m for m in spec["containerEdits"]["mounts"] if m["containerPath"] == LIMITS_MOUNT)
    assert mount == {
        "hostPath": f"/usr/local/vgpu/limits/{UID}.conf",
        "containerPath": "/etc/vgpu-bridge/limits.conf",
        "options": ["ro", "nosuid", "nodev", "noexec", "rbind"],
    }


def test_two_shares_of_one_gpu_in_one_claim_add_up_in_the_limits_file() -> None:
    claim = allocated_claim(
        result("gpu-0", memory="3000Mi", cores="60"),
        result("gpu-0", memory="1Gi", cores="50", share_id="7c6c2d7e-0000-4000-8000-000000000002"),
        uid=UID,
    )
    spec = build_spec(
        claim_shares(claim, uid=UID, node=NODE, profile=DEFAULT, gpus=BY_NAME), LAYOUT
    )
    assert limits_text(spec).splitlines()[:3] == [
        "vgpu-bridge-limits 2",
        "CUDA_DEVICE_MEMORY_LIMIT_GPU-aaaa=4024m",
        "CUDA_DEVICE_SM_LIMIT_GPU-aaaa=100",
    ]


@pytest.mark.parametrize(
    ("uuid", "why"),
    [
        ("gpu0", "GPU uuid 'gpu0'"),
        ("GPU-a=b", "GPU uuid 'GPU-a=b'"),
        ("GPU-" + "a" * 60, "GPU uuid"),
    ],
)
def test_a_gpu_uuid_libvgpu_cannot_key_is_refused(uuid: str, why: str) -> None:
    gpus = {
        name: replace(gpu, uuid=uuid if name == "gpu-1" else gpu.uuid)
        for name, gpu in BY_NAME.items()
    }
    with pytest.raises(ValueError, match=why):
        limits_text(build_spec(_two_shares(gpus), LAYOUT))


def test_a_spec_whose_uuids_do_not_match_its_devices_is_refused() -> None:
    spec = build_spec(_two_shares(), LAYOUT)
    spec["devices"] = spec["devices"][:1]
    with pytest.raises(ValueError, match="2 GPU UUIDs for 1 devices"):
        limits_text(spec)


def test_a_limits_file_over_4096_bytes_is_refused() -> None:
    spec = build_spec(_two_shares(), LAYOUT)
    cache = "CUDA_DEVICE_MEMORY_SHARED_CACHE="
    spec["containerEdits"]["env"] = [
        e if not e.startswith(cache) else cache + "/x" * 2100 for e in spec["containerEdits"]["env"]
    ]
    with pytest.raises(ValueError, match="over 4096"):
        limits_text(spec)


def test_the_limits_file_is_0444_in_a_0755_dir_whatever_the_umask(tmp_path: Path) -> None:
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    layout.cdi_dir.mkdir()
    text = spec_text(build_spec(_two_shares(), layout))
    old = os.umask(0o077)
    try:
        write_spec(text, UID, layout)
    finally:
        os.umask(old)
    path = layout.limits_path(UID)
    assert path.stat().st_mode & 0o7777 == 0o444
    assert layout.limits_dir.stat().st_mode & 0o7777 == 0o755
    assert path.read_text() == limits_text(json.loads(text))


@pytest.mark.parametrize("damage", ["missing", "edited", "writable", "symlink"])
def test_a_limits_file_not_as_written_makes_the_spec_not_current(
    tmp_path: Path, damage: str
) -> None:
    """Start-up and the idempotent Prepare rewrite the spec and its limits file together."""
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    layout.cdi_dir.mkdir()
    text = spec_text(build_spec(_two_shares(), layout))
    write_spec(text, UID, layout)
    path = layout.limits_path(UID)
    wanted = path.read_bytes()
    path.unlink()
    if damage == "edited":
        path.write_bytes(wanted.replace(b"=3000m", b"=80000m"))
        path.chmod(0o444)
    elif damage == "writable":
        path.write_bytes(wanted)
        path.chmod(0o666)
    elif damage == "symlink":
        (tmp_path / "elsewhere").write_bytes(wanted)
        path.symlink_to(tmp_path / "elsewhere")
    assert not spec_is_current(text, UID, layout)
    write_spec(text, UID, layout)
    assert spec_is_current(text, UID, layout)
    assert path.read_bytes() == wanted


def test_only_our_exact_spec_names_with_a_uuid_are_ours() -> None:
    """A file named like our spec with `..` (or anything but a UUID) where the uid goes is not
    ours: start-up never removes it, nor a claim dir its name points at."""
    vendor = "k8s.gpu.vgpu-bridge.io-claim_"
    assert LAYOUT.claim_uid_of(Path(f"{vendor}{UID}.json")) == UID
    for name in (f"{vendor}...json", f"{vendor}.json", f"{vendor}{UID}.json.bak",
                 f"x{vendor}{UID}.json", f"{vendor}{UID.upper()}.json"):  # fmt: skip
        assert LAYOUT.claim_uid_of(Path(name)) is None, name


def test_a_failed_write_leaves_neither_spec_nor_temp_file_nor_shared_dir(tmp_path: Path) -> None:
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    layout.cdi_dir.write_text("not a directory")  # writes into it fail like a read-only dir
    spec = build_spec(_two_shares(), layout)
    with pytest.raises(OSError):  # noqa: PT011 - the errno depends on the failure
        write_spec(spec_text(spec), UID, layout)
    assert not layout.shared_dir(UID).exists()
    assert layout.cdi_dir.read_text() == "not a directory"
