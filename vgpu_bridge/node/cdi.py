"""CDI specs: one transient spec per claim, carrying exactly the claim's shares to libvgpu.

The spec's devices are the claim's shares in allocation order; share `i` sets
`CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m` and `CUDA_DEVICE_SM_LIMIT_<i>=<percent>` (and its device node
on a real GPU). The spec-wide edits apply whenever any of its devices is used: the visible GPUs,
`CUDA_DEVICE_SM_LIMIT` (the first share's cores, as legacy HAMi sets it), the shared-region file,
`CUDA_TASK_PRIORITY`, `CUDA_TASK_PRIORITY_DIR`, and the mounts of libvgpu.so, /etc/ld.so.preload,
the claim's shared-region directory and the node's priority directory. The priority directory
(`<vgpu_dir>/priority`, mode 01777 like /tmp) is one for the whole node, mounted read-write into
every claimed container: libvgpu keeps a board per GPU in it, on which a priority-0 task's
launches hold back those of lower-priority tasks of other containers. The claim's shared-region
directory is mode 0777: whichever container of the claim starts first creates the region file
there, under whatever user it runs as (not sticky, so fs.protected_regular never refuses the
others' `O_CREAT` open of that file). With a driver root (`--driver-root`, `driver_root.py`),
the spec-wide edits also carry the driver: each library read-only at its SONAME in both
`/usr/lib/<triplet>` and `/usr/lib64` (libcuda also as `libcuda.so`), the binaries in /usr/bin,
and the device nodes from `<driver root>/dev` where the driver's nodes are there; no OCI hook,
nothing run in the container (docs/driver-stack.md). With mock cards and the stand-in driver
(`mock_driver.py`: the fake libcuda and NVML as the driver root), the spec-wide env also carries
the fake's settings for the claim's cards: FAKE_CUDA_MEMORY (bytes), FAKE_CUDA_SM_COUNT,
FAKE_NVML_NAME and FAKE_NVML_DRIVER_VERSION (`mock_driver_env`); the fake presents the cards
NVIDIA_VISIBLE_DEVICES names. Building is pure; writing is atomic.

The limits file (`<vgpu_dir>/limits/<uid>.conf`, 0444, in a root-owned 0755 dir no container
can write) says the claim's limits once more, where the container cannot change them, keyed by
GPU UUID (the tenant picks CUDA ordinals: CUDA_VISIBLE_DEVICES reorders them): the spec mounts it
read-only at LIMITS_MOUNT, and libvgpu takes each visible device's limits from it by the UUID
the driver reports, refusing any device it does not name (a second claim's device in the same
container, whose own file could not be mounted at the same path). Format (version 2, read by
native/vgpu/src/limits_file.c): the line `vgpu-bridge-limits 2`, then per GPU of the claim
`CUDA_DEVICE_MEMORY_LIMIT_<uuid>=<MiB>m` and `CUDA_DEVICE_SM_LIMIT_<uuid>=<percent>` (two shares
of one GPU in one claim add up, cores at most 100), then `CUDA_DEVICE_MEMORY_SHARED_CACHE` and
`CUDA_TASK_PRIORITY` as the spec sets them; at most LIMITS_MAX_BYTES in all.

Enforcer mode (`CdiLayout.enforcer`, `enforcer.py`): the cards are NVIDIA's DRA driver's, and its
own spec gives the container the card's device node, the driver's files and
`NVIDIA_VISIBLE_DEVICES=void`. Ours then carries only the limits: no device node, no driver file,
no `NVIDIA_VISIBLE_DEVICES` (a second value of it would depend on the order the runtime applies
the two specs, and a legacy NVIDIA runtime hook would read a UUID there as a card to add). Each
device names its card in the CDI device annotation `<driver>/gpu-uuid` instead (annotations are
metadata of the spec: no container sees them), from which the limits file is written; specs of
our own mode, and those written before, keep naming them in `NVIDIA_VISIBLE_DEVICES`.
"""

from __future__ import annotations

import contextlib
import json
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vgpu_bridge.atomic_files import holds, write_atomic
from vgpu_bridge.node.allocation import ClaimShares
from vgpu_bridge.node.driver_root import DriverStack
from vgpu_bridge.node.files import remove, remove_tree
from vgpu_bridge.node.names import UUID

Json = dict[str, Any]
CDI_VERSION = "0.6.0"  # annotations need 0.6.0; env, mounts and device nodes need less
CDI_CLASS = "claim"
CONTAINER_VGPU_DIR = "/usr/local/vgpu"
CONTAINER_SHARED_DIR = f"{CONTAINER_VGPU_DIR}/shared"
CONTAINER_PRIORITY_DIR = f"{CONTAINER_VGPU_DIR}/priority"
# like /tmp: any container's user may add a GPU's board, only its owner may remove it
PRIORITY_DIR_MODE = 0o1777
# any user of the claim's containers may create the region file; not sticky (fs.protected_regular)
SHARED_DIR_MODE = 0o777
SHARED_REGION_FILE = "vgpu.cache"
CLAIMS_DIR = "claims"  # in the host's vgpu dir: one shared-region dir per claim
LIBRARY_FILE = "libvgpu.so"  # in the host's vgpu dir and in CONTAINER_VGPU_DIR
PRELOAD_FILE = "ld.so.preload"  # in the host's vgpu dir, mounted as the container's PRELOAD_MOUNT
CONTAINER_LIBRARY = f"{CONTAINER_VGPU_DIR}/{LIBRARY_FILE}"
PRELOAD_MOUNT = "/etc/ld.so.preload"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
LIMITS_DIR = "limits"  # in the host's vgpu dir: one limits file per claim, root's alone
LIMITS_DIR_MODE = 0o755
LIMITS_FILE_MODE = 0o444
LIMITS_MOUNT = "/etc/vgpu-bridge/limits.conf"
LIMITS_HEADER = "vgpu-bridge-limits 2"
LIMITS_MAX_BYTES = 4096
LIMITS_FILE_PATTERN = rf"({UUID.pattern})\.conf"
# What the limits file carries beside each GPU's limits: the priority, and the claim's region (so
# a process cannot leave the claim's shared accounting by pointing its variable at its own file).
CLAIM_KEYS = ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "CUDA_TASK_PRIORITY")
# A GPU UUID as libvgpu accepts it in a key (NVML's are "GPU-" and 36 hex digits and dashes)
GPU_UUID = re.compile(r"GPU-[A-Za-z0-9-]{1,59}")
MEMORY_VALUE = re.compile(r"([0-9]+)m")
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
UUID_ANNOTATION = "gpu-uuid"  # enforcer mode: a CDI device annotation (`uuid_annotation`)


def claim_dir(vgpu_dir: Path, claim_uid: str) -> Path:
    """A claim's shared-region directory on the host (mounted at CONTAINER_SHARED_DIR)."""
    return vgpu_dir / CLAIMS_DIR / claim_uid


@dataclass(frozen=True)
class CdiLayout:
    """Where this agent writes specs and what host paths the specs mount."""

    cdi_dir: Path
    vgpu_dir: Path  # host: libvgpu.so, ld.so.preload, claims/<uid>/ (shared regions), priority/
    driver: str
    driver_stack: DriverStack | None = None  # None: no driver files (no --driver-root)
    # enforcer mode: another driver's spec gives the container its cards (no visible devices)
    enforcer: bool = False
    # mock cards with the stand-in driver (`mock_driver.py`): the fake's settings in the env
    mock_driver: bool = False

    @property
    def vendor(self) -> str:
        return f"k8s.{self.driver}"

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{CDI_CLASS}"

    def spec_path(self, claim_uid: str) -> Path:
        """`<vendor>-<class>_<claimUID>.json`, as CDI's transient spec names go."""
        return self.cdi_dir / f"{self.vendor}-{CDI_CLASS}_{claim_uid}.json"

    def shared_dir(self, claim_uid: str) -> Path:
        return claim_dir(self.vgpu_dir, claim_uid)

    @property
    def limits_dir(self) -> Path:
        return self.vgpu_dir / LIMITS_DIR

    def limits_path(self, claim_uid: str) -> Path:
        return self.limits_dir / f"{claim_uid}.conf"

    @property
    def priority_dir(self) -> Path:
        """The node's priority boards (one per GPU), shared by every claimed container."""
        return self.vgpu_dir / "priority"

    def device_id(self, claim_uid: str, index: int) -> str:
        return f"{self.kind}={device_name(claim_uid, index)}"

    @property
    def spec_name_pattern(self) -> str:
        """Our spec files' names exactly (a regular expression): the claim uid a UUID."""
        return rf"{re.escape(f'{self.vendor}-{CDI_CLASS}_')}({UUID.pattern})\.json"

    def claim_uid_of(self, path: Path) -> str | None:
        """The claim uid of one of our spec files; None for any other name (only what this
        agent wrote is ever removed: a `..` where the uid goes is not ours)."""
        found = re.fullmatch(self.spec_name_pattern, path.name)
        return found.group(1) if found else None

    def claim_uid_of_limits(self, path: Path) -> str | None:
        found = re.fullmatch(LIMITS_FILE_PATTERN, path.name)
        return found.group(1) if found else None


def device_name(claim_uid: str, index: int) -> str:
    return f"{claim_uid}-{index}"


def uuid_annotation(driver: str) -> str:
    """The CDI device annotation that names an enforced share's card (`<driver>/gpu-uuid`)."""
    return f"{driver}/{UUID_ANNOTATION}"


def build_spec(claim: ClaimShares, layout: CdiLayout) -> Json:
    """The claim's CDI spec (pure)."""
    devices = []
    for index, share in enumerate(claim.shares):
        edits: Json = {
            "env": [
                f"CUDA_DEVICE_MEMORY_LIMIT_{index}={share.memory_mib}m",
                f"CUDA_DEVICE_SM_LIMIT_{index}={share.cores}",
            ]
        }
        if share.gpu.device_node is not None:
            edits["deviceNodes"] = [_device_node(share.gpu.device_node, layout)]
        device: Json = {"name": device_name(claim.uid, index), "containerEdits": edits}
        if layout.enforcer:  # the card's uuid, for the limits file, where no container reads it
            device["annotations"] = {uuid_annotation(layout.driver): share.gpu.uuid}
        devices.append(device)
    spec: Json = {
        "cdiVersion": CDI_VERSION,
        "kind": layout.kind,
        "annotations": {
            f"{layout.driver}/claim": f"{claim.namespace}/{claim.name}",
            f"{layout.driver}/claim-uid": claim.uid,
        },
        "devices": devices,
        "containerEdits": _common_edits(claim, layout),
    }
    return spec


def _common_edits(claim: ClaimShares, layout: CdiLayout) -> Json:
    shares = claim.shares
    env = [] if layout.enforcer else [f"{VISIBLE_DEVICES}={','.join(s.gpu.uuid for s in shares)}"]
    if shares:
        env.append(f"CUDA_DEVICE_SM_LIMIT={shares[0].cores}")
    env.append(f"CUDA_DEVICE_MEMORY_SHARED_CACHE={CONTAINER_SHARED_DIR}/{SHARED_REGION_FILE}")
    if claim.priority is not None:
        env.append(f"CUDA_TASK_PRIORITY={claim.priority}")
    env.append(f"CUDA_TASK_PRIORITY_DIR={CONTAINER_PRIORITY_DIR}")
    if layout.driver_stack is not None:
        # Triton (torch.compile, vLLM) finds libcuda by `ldconfig -p`, which knows nothing of
        # our mounts, unless this names a dir holding libcuda.so.1 and libcuda.so
        env.append(f"TRITON_LIBCUDA_PATH={layout.driver_stack.container_library_dirs[0]}")
    if layout.mock_driver and layout.driver_stack is not None and shares:
        env += mock_driver_env(claim, version=layout.driver_stack.version)
    host = layout.vgpu_dir
    driver_mounts = layout.driver_stack.file_mounts() if layout.driver_stack else ()
    edits: Json = {
        "env": env,
        "mounts": [
            _mount(host / LIBRARY_FILE, CONTAINER_LIBRARY, "ro"),
            _mount(host / PRELOAD_FILE, PRELOAD_MOUNT, "ro"),
            _mount(layout.shared_dir(claim.uid), CONTAINER_SHARED_DIR, "rw"),
            _mount(layout.priority_dir, CONTAINER_PRIORITY_DIR, "rw"),
            {
                "hostPath": str(layout.limits_path(claim.uid)),
                "containerPath": LIMITS_MOUNT,
                "options": ["ro", "nosuid", "nodev", "noexec", "rbind"],
            },
            *(_mount(Path(path), container, "ro") for path, container in driver_mounts),
        ],
    }
    if any(s.gpu.device_node is not None for s in shares):
        edits["deviceNodes"] = [_device_node(path, layout) for path in CONTROL_DEVICES]
    return edits


def mock_driver_env(claim: ClaimShares, *, version: str) -> list[str]:
    """The stand-in driver's settings for the claim's cards (native/vgpu/tests/fake/fake.h): one
    value for every card it presents, so the memory is the largest of the claim's cards and the
    product name and SM count the first share's card's (a node's mock cards are alike)."""
    first = claim.shares[0].gpu
    env = [f"FAKE_CUDA_MEMORY={max(share.gpu.memory for share in claim.shares)}"]
    if first.sm_count is not None:
        env.append(f"FAKE_CUDA_SM_COUNT={first.sm_count}")
    env += [f"FAKE_NVML_NAME={first.product_name}", f"FAKE_NVML_DRIVER_VERSION={version}"]
    return env


def _device_node(path: str, layout: CdiLayout) -> Json:
    """A device node, from the driver root's /dev where the driver's nodes are (GPU Operator)."""
    if layout.driver_stack is None:
        return {"path": path}
    return dict(layout.driver_stack.device_node(path))


def _mount(host: Path, container: str, access: str) -> Json:
    return {
        "hostPath": str(host),
        "containerPath": container,
        "options": [access, "nosuid", "nodev", "bind"],
    }


def spec_text(spec: Json) -> str:
    """The file content of a spec (kept verbatim in the checkpoint)."""
    return json.dumps(spec, indent=2, sort_keys=True) + "\n"


def limits_text(spec: Json) -> str:
    """The limits file for a spec: each GPU's limits by UUID, in share order, then the region and
    the priority. ValueError for a spec whose GPUs libvgpu could not be told apart."""
    devices = spec.get("devices") or []
    common = _env(spec.get("containerEdits") or {})
    uuids = _uuids(devices, common)
    if len(uuids) != len(devices):
        raise ValueError(f"the spec names {len(uuids)} GPU UUIDs for {len(devices)} devices")
    per_gpu: dict[str, tuple[int, int]] = {}
    for index, (device, uuid) in enumerate(zip(devices, uuids, strict=True)):
        if not GPU_UUID.fullmatch(uuid):
            raise ValueError(f"GPU uuid {uuid!r}: libvgpu keys limits by GPU-<letters, digits, ->")
        env = _env(device.get("containerEdits") or {})
        memory = MEMORY_VALUE.fullmatch(env.get(f"CUDA_DEVICE_MEMORY_LIMIT_{index}", ""))
        cores = env.get(f"CUDA_DEVICE_SM_LIMIT_{index}", "")
        if memory is None or not cores.isdigit():
            raise ValueError(f"device {index} of the spec has no memory or SM limit")
        mib, percent = per_gpu.get(uuid, (0, 0))
        per_gpu[uuid] = (mib + int(memory.group(1)), min(100, percent + int(cores)))
    lines = [LIMITS_HEADER]
    for uuid, (mib, percent) in per_gpu.items():
        lines += [
            f"CUDA_DEVICE_MEMORY_LIMIT_{uuid}={mib}m",
            f"CUDA_DEVICE_SM_LIMIT_{uuid}={percent}",
        ]
    lines += [f"{key}={common[key]}" for key in CLAIM_KEYS if key in common]
    text = "\n".join([*lines, ""])
    if len(text.encode()) > LIMITS_MAX_BYTES:
        raise ValueError(f"the limits file would be {len(text)} bytes, over {LIMITS_MAX_BYTES}")
    return text


def _uuids(devices: list[Json], common: dict[str, str]) -> list[str]:
    """The GPU of each device: NVIDIA_VISIBLE_DEVICES in order (our own cards), else each
    device's `<driver>/gpu-uuid` annotation (enforcer mode, where the variable is not ours)."""
    if not devices:
        return []
    if VISIBLE_DEVICES in common:
        return common[VISIBLE_DEVICES].split(",")
    uuids = []
    for device in devices:
        annotations = device.get("annotations") or {}
        named = [str(v) for k, v in annotations.items() if k.endswith(f"/{UUID_ANNOTATION}")]
        uuids += named[:1]
    return uuids


def _env(edits: Json) -> dict[str, str]:
    """A container edit's environment as a mapping (the first of a repeated name)."""
    found: dict[str, str] = {}
    for entry in edits.get("env") or ():
        key, _, value = str(entry).partition("=")
        found.setdefault(key, value)
    return found


def write_spec(text: str, claim_uid: str, layout: CdiLayout) -> None:
    """Create the claim's shared-region dir, write its limits file and then its spec, each
    atomically; on failure none of them. The node's priority dir is created too when missing
    (and stays: every claim mounts it)."""
    _ensure_dir(layout.priority_dir, PRIORITY_DIR_MODE)
    _ensure_dir(layout.limits_dir, LIMITS_DIR_MODE)
    limits = limits_text(json.loads(text)).encode()
    shared = layout.shared_dir(claim_uid)
    existed = shared.is_dir()
    try:
        _ensure_dir(shared, SHARED_DIR_MODE)
        write_atomic(layout.limits_path(claim_uid), limits, mode=LIMITS_FILE_MODE, durable=False)
        write_atomic(layout.spec_path(claim_uid), text.encode(), durable=False)  # tmpfs
    except BaseException:
        remove(layout.limits_path(claim_uid), durable=False)
        if not existed:
            with contextlib.suppress(OSError):  # the write's error is the one to report
                remove_tree(shared.parent, shared)
        raise


def _ensure_dir(path: Path, mode: int) -> None:
    """`path` as a directory of exactly `mode`, set explicitly (mkdir's is masked by the umask)."""
    path.mkdir(parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != mode:
        path.chmod(mode)


def _is_dir_of_mode(path: Path, mode: int) -> bool:
    try:
        found = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISDIR(found) and stat.S_IMODE(found) == mode


def spec_is_current(text: str, claim_uid: str, layout: CdiLayout) -> bool:
    """The spec file exists with exactly this content, so does the limits file it mounts, and
    the dirs it mounts, each with its mode."""
    try:
        on_disk = layout.spec_path(claim_uid).read_text()
    except OSError:
        return False
    dirs = (
        (layout.shared_dir(claim_uid), SHARED_DIR_MODE),
        (layout.priority_dir, PRIORITY_DIR_MODE),
        (layout.limits_dir, LIMITS_DIR_MODE),
    )
    try:
        limits = limits_text(json.loads(text))
    except ValueError:  # not writable either: Prepare reports it
        return False
    return (
        on_disk == text
        and holds(layout.limits_path(claim_uid), limits.encode(), LIMITS_FILE_MODE)
        and all(_is_dir_of_mode(path, mode) for path, mode in dirs)
    )


def remove_spec(claim_uid: str, layout: CdiLayout) -> None:
    """Remove the claim's spec and limits file (fine when they are already gone). Its
    shared-region dir is the tenant's to fill: removed apart (`claimdirs.trash`), outside any
    lock; the node's priority dir stays."""
    remove(layout.spec_path(claim_uid), durable=False)
    remove(layout.limits_path(claim_uid), durable=False)
