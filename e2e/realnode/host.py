"""What the real node changes on the host, and how it is put back.

Everything the node creates lives under its own directories (``Layout``) and its own cgroup
(``Layout.cgroup_root`` in every v1 hierarchy), so teardown can find it without guessing:
processes are found through that cgroup and through pid files, mounts through their mount point
prefix. The kernel tunables the kubelet writes are saved to a file before the first start and
restored from it by ``down``, also after a crash.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
PROC_SYS = Path("/proc/sys")
#: Written by the kubelet's container manager (setupKernelTunables) unless protectKernelDefaults.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
#: The v1 hierarchies the kubelet (and runc) create pod cgroups in.
HIERARCHIES = (
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "blkio",
    "pids",
    "hugetlb",
    "systemd",
)
#: Where pod cgroups can appear: the v1 hierarchies plus the cgroup2 mount of this hybrid layout
#: (runc mirrors the path there).
ALL_HIERARCHIES = (*HIERARCHIES, "unified")
CAP_SYS_RESOURCE = 24


@dataclass(frozen=True)
class Layout:
    """The node's own directories; nothing of it lives in the default /var/lib/kubelet or
    /run/containerd, so another engineer's runtime on the same machine is never touched."""

    root: Path = Path("/var/lib/vgpu-bridge-realnode")
    run: Path = Path("/run/vgpu-bridge-realnode")
    cgroup_name: str = "vgpu-realnode"
    #: GPU Operator's driver root (driver_root.OPERATOR_DRIVER_ROOT): made only where nothing is
    operator_driver_root: Path = Path("/run/nvidia/driver")

    @property
    def cgroup_root(self) -> str:
        return "/" + self.cgroup_name

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "kubelet"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return self.run / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.run / "cdi"

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def saved_sysctls(self) -> Path:
        return self.root / "saved-sysctls.json"

    @property
    def pids(self) -> Path:
        return self.root / "pids.json"

    @property
    def driver_root(self) -> Path:
        """The stand-in driver install of a host-install layout (a directory playing `/`)."""
        return self.root / "driver-root"

    @property
    def driver_root_mount(self) -> Path:
        """Where the agent sees a driver root through a read-only bind mount (the chart's
        /driver-root)."""
        return self.root / "driver-root-mount"

    @property
    def created_dirs(self) -> Path:
        """The directories outside ``root`` and ``run`` the tier made (driver_root.py)."""
        return self.root / "created-dirs.json"

    @property
    def cluster_state(self) -> Path:
        return self.root / "cluster"


# --- facts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostFacts:
    kernel: str
    cgroup_fs_type: str
    cgroup_v1_hierarchies: tuple[str, ...]
    unified_controllers: str
    cap_bounding: int
    seccomp_header: bool

    @property
    def has_cap_sys_resource(self) -> bool:
        return bool(self.cap_bounding >> CAP_SYS_RESOURCE & 1)

    def lines(self) -> list[str]:
        return [
            f"kernel {self.kernel}",
            f"/sys/fs/cgroup is {self.cgroup_fs_type}; v1 hierarchies: "
            + ",".join(self.cgroup_v1_hierarchies),
            f"cgroup2 controllers (unified): {self.unified_controllers or '(none)'}",
            f"CapBnd {self.cap_bounding:016x}: CAP_SYS_RESOURCE "
            + ("present" if self.has_cap_sys_resource else "MISSING (restrict_oom_score_adj)"),
            f"libseccomp-dev: {'installed' if self.seccomp_header else 'missing'}",
        ]


def host_facts() -> HostFacts:
    fs_type = subprocess.run(
        ["stat", "-fc", "%T", str(CGROUP_FS)], capture_output=True, text=True, check=False
    ).stdout.strip()
    hierarchies = tuple(
        sorted(
            p.name
            for p in CGROUP_FS.iterdir()
            if p.is_dir() and not p.is_symlink() and p.name != "unified"
        )
    )
    unified = ""
    with contextlib.suppress(OSError):
        unified = (CGROUP_FS / "unified" / "cgroup.controllers").read_text().strip()
    cap_bounding = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            cap_bounding = int(line.split()[1], 16)
    return HostFacts(
        kernel=os.uname().release,
        cgroup_fs_type=fs_type,
        cgroup_v1_hierarchies=hierarchies,
        unified_controllers=unified,
        cap_bounding=cap_bounding,
        seccomp_header=Path("/usr/include/seccomp.h").is_file(),
    )


# --- sysctls ------------------------------------------------------------------------------------


def read_sysctls(keys: Sequence[str] = KUBELET_SYSCTLS) -> dict[str, str]:
    """The values of ``keys`` (paths under /proc/sys) now; one that cannot be read is left out."""
    values = {}
    for key in keys:
        with contextlib.suppress(OSError):
            values[key] = (PROC_SYS / key).read_text().strip()
    return values


def save_sysctls(layout: Layout) -> dict[str, str]:
    """Record the values before the kubelet runs; an existing record (a crashed run's) wins."""
    if layout.saved_sysctls.is_file():
        saved: dict[str, str] = json.loads(layout.saved_sysctls.read_text())
        return saved
    values = read_sysctls()
    layout.saved_sysctls.parent.mkdir(parents=True, exist_ok=True)
    partial = layout.saved_sysctls.with_suffix(".partial")
    partial.write_text(json.dumps(values, indent=2))
    partial.replace(layout.saved_sysctls)
    return values


def restore_sysctls(layout: Layout) -> dict[str, tuple[str, str]]:
    """Write back what ``save_sysctls`` recorded; returns key -> (found, restored) for changes."""
    try:
        saved: dict[str, str] = json.loads(layout.saved_sysctls.read_text())
    except (OSError, ValueError):
        return {}
    changed = {}
    for key, value in saved.items():
        path = Path("/proc/sys") / key
        current = path.read_text().strip()
        if current != value:
            path.write_text(value + "\n")
            changed[key] = (current, value)
    layout.saved_sysctls.unlink()
    return changed


# --- processes ----------------------------------------------------------------------------------


def cgroup_pids(layout: Layout) -> set[int]:
    """Every process in the node's cgroup subtree (pods, sandboxes), in any hierarchy."""
    pids: set[int] = set()
    for hierarchy in ALL_HIERARCHIES:
        top = CGROUP_FS / hierarchy / layout.cgroup_name
        if not top.is_dir():
            continue
        for procs in top.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(line) for line in procs.read_text().split())
    return pids


def processes_mentioning(needle: str) -> set[int]:
    """Pids whose command line contains ``needle`` (a path of ours, e.g. the containerd socket)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if needle.encode() in cmdline:
                found.add(int(entry.name))
    return found


def kill_and_wait(pids: set[int], *, timeout_s: float = 10.0) -> set[int]:
    """SIGKILL ``pids`` (all of them ours) and wait until gone; returns the ones still alive."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if _alive(pid)}
        if alive:
            time.sleep(0.05)
    return alive


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    if state == "Z":
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


# --- cgroups ------------------------------------------------------------------------------------


def create_cgroup_root(layout: Layout) -> None:
    """``/<cgroup_name>`` in every mounted v1 hierarchy (the kubelet's cgroupRoot must exist)."""
    for hierarchy in HIERARCHIES:
        base = CGROUP_FS / hierarchy
        if not base.is_dir():
            continue
        top = base / layout.cgroup_name
        top.mkdir(exist_ok=True)
        if hierarchy == "cpuset":
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if not (top / knob).read_text().strip():
                    (top / knob).write_text((base / knob).read_text())


def remove_cgroups(layout: Layout) -> list[str]:
    """rmdir the node's cgroup subtree, deepest first; returns what could not be removed."""
    left = []
    for hierarchy in ALL_HIERARCHIES:
        top = CGROUP_FS / hierarchy / layout.cgroup_name
        if not top.is_dir():
            continue
        directories = sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        )
        for directory in [*directories, top]:
            for attempt in range(20):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if attempt == 19:
                        left.append(str(directory))
                    time.sleep(0.05)
    return left


# --- mounts -------------------------------------------------------------------------------------


def mounts_under(*prefixes: Path) -> list[str]:
    """Mount points (from /proc/self/mountinfo) at or below any of ``prefixes``, deepest first."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape(line.split()[4])
        if any(point == str(p) or point.startswith(str(p) + "/") for p in prefixes):
            points.append(point)
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


def unmount_all(*prefixes: Path) -> list[str]:
    """Unmount everything below ``prefixes`` (lazily if busy); returns what is still mounted."""
    for _ in range(5):
        points = mounts_under(*prefixes)
        if not points:
            return []
        for point in points:
            done = subprocess.run(["umount", point], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    return mounts_under(*prefixes)


def _unescape(field: str) -> str:
    return field.encode().decode("unicode_escape") if "\\" in field else field
