"""What the kind tier changes on the host, recorded before and put back after.

Privileged kind nodes share the host's kernel: each node's kubelet writes ``KUBELET_SYSCTLS``
(as the real-node tier's kubelet does), Docker creates ``/lib/modules`` when the host has none
(kind mounts it into every node), a bridge per network and a veth per node, and every
container's cgroups appear under ``CGROUP_PARENT``. ``record`` saves the state before the first
node starts (kept if a crashed run already saved it); ``restore`` puts it back, also after a
crash (``python -m e2e.kind down``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from e2e.kind import dockerd
from e2e.kind.dockerd import CGROUP_PARENT
from e2e.realnode.host import KUBELET_SYSCTLS, PROC_SYS, read_sysctls

#: host-wide tunables a node can write: the kubelet's (setupKernelTunables), and what Debian's
#: systemd-sysctl would apply (the node image drops those files; checked anyway)
WATCHED_SYSCTLS = (
    *KUBELET_SYSCTLS,
    "kernel/pid_max",
    "kernel/sysrq",
    "kernel/core_uses_pid",
    "fs/protected_regular",
    "fs/protected_fifos",
    "fs/protected_hardlinks",
    "fs/protected_symlinks",
)
CGROUP_FS = Path("/sys/fs/cgroup")
LIB_MODULES = Path("/lib/modules")
#: link names Docker gives its bridges and veths
DOCKER_LINK_PREFIXES = ("docker", "br-", "veth")


@dataclass
class HostState:
    sysctls: dict[str, str]
    lib_modules_existed: bool
    links: list[str]

    @classmethod
    def now(cls) -> HostState:
        return cls(read_sysctls(WATCHED_SYSCTLS), LIB_MODULES.exists(), network_links())


@dataclass
class Restored:
    """What ``restore`` found changed and put back (empty when the host was as recorded)."""

    changes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def report(self) -> int:
        """Prints what was put back (stdout) and what was not (stderr); the exit status of a
        tier's `down`: 1 when anything could not be put back."""
        for line in self.changes:
            print(f"restored: {line}")
        for line in self.failures:
            print(f"NOT restored: {line}", file=sys.stderr)
        return 1 if self.failures else 0


def network_links() -> list[str]:
    return sorted(os.listdir("/sys/class/net"))


def record(state_file: Path) -> HostState:
    """Save the host's state unless a run that did not finish saved it already."""
    if state_file.is_file():
        return load(state_file)
    state = HostState.now()
    state_file.parent.mkdir(parents=True, exist_ok=True)
    partial = state_file.with_suffix(".partial")
    partial.write_text(json.dumps(state.__dict__))
    partial.replace(state_file)
    return state


def start_dockerd(data_root: Path, state_file: Path) -> None:
    """The host's state recorded in ``state_file``, then the tier's dockerd started on
    ``data_root`` (the kind tier and ``make images``)."""
    record(state_file)
    dockerd.start(data_root)


def stop_dockerd(data_root: Path, state_file: Path) -> Restored:
    """The tier's dockerd stopped (its log kept beside ``state_file``), what it left on the host
    cleaned up, and the host put back as ``state_file`` recorded."""
    dockerd.stop(state_file.parent / "dockerd.log")
    dockerd.clean_up_after(data_root)
    return restore(state_file)


def load(state_file: Path) -> HostState:
    return HostState(**json.loads(state_file.read_text()))


def restore(state_file: Path) -> Restored:
    """Put back what the tier changed (run after dockerd stopped); forget the record."""
    done = Restored()
    if not state_file.is_file():
        _remove_cgroups(done)
        return done
    state = load(state_file)
    _restore_sysctls(state, done)
    _remove_links(state, done)
    _remove_cgroups(done)
    if not state.lib_modules_existed and LIB_MODULES.is_dir():
        try:
            LIB_MODULES.rmdir()
            done.changes.append(f"{LIB_MODULES}: removed (Docker created it)")
        except OSError as error:
            done.failures.append(f"{LIB_MODULES}: {error}")
    if not done.failures:
        state_file.unlink()
    return done


def _restore_sysctls(state: HostState, done: Restored) -> None:
    for key, value in state.sysctls.items():
        now = (PROC_SYS / key).read_text().strip()
        if now != value:
            try:
                (PROC_SYS / key).write_text(value)
                done.changes.append(f"sysctl {key}: {now} -> {value}")
            except OSError as error:
                done.failures.append(f"sysctl {key}: {error}")


def _remove_links(state: HostState, done: Restored) -> None:
    for link in network_links():
        if link not in state.links and link.startswith(DOCKER_LINK_PREFIXES):
            result = subprocess.run(
                ["ip", "link", "delete", link], capture_output=True, text=True, check=False
            )
            gone = result.returncode == 0 or not Path("/sys/class/net", link).exists()
            (done.changes if gone else done.failures).append(f"link {link}: deleted")


def _remove_cgroups(done: Restored) -> None:
    for hierarchy in sorted(CGROUP_FS.iterdir()):
        top = hierarchy / CGROUP_PARENT
        if not top.is_dir() or top.is_symlink():
            continue
        for directory in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if directory.is_dir():
                with contextlib.suppress(OSError):
                    directory.rmdir()
        try:
            top.rmdir()
            done.changes.append(f"cgroup {top}: removed")
        except OSError as error:
            done.failures.append(f"cgroup {top}: {error}")
