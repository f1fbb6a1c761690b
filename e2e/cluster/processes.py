"""Starting and stopping the component processes, tracked by pid so nothing outlives the cluster.

Every component runs in its own session (process group). Its pid goes to a pid file at once, so a
later ``down`` (or the next run) can stop it even if the process that started it died. Before a
signal is sent, the pid's command line is checked to still be ours: a recycled pid is left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_PR_SET_PDEATHSIG = 1
#: Components started by this process, so their exit status can be reported.
_children: dict[int, subprocess.Popen[bytes]] = {}


class ComponentExitedError(RuntimeError):
    """A component process ended while the cluster still needed it."""


@dataclass(frozen=True)
class Running:
    """A started component: its name, pid, log file, and what tells it from a recycled pid.

    Pids wrap quickly here (``pid_max`` 32768, busy Go builds), and every cluster runs the same
    binary, so identity is the pid *and* the binary *and* the process's start time.
    """

    name: str
    pid: int
    log: Path
    binary: Path
    started: int = -1  # /proc/<pid>/stat starttime (clock ticks since boot); -1: not checked

    def alive(self) -> bool:
        child = _children.get(self.pid)
        # Started by us: its Popen knows, also right after fork, when /proc/<pid>/cmdline is
        # still python's or empty (execve not done yet): reading it then made starts fail.
        running = child.poll() is None if child is not None else _is_ours(self.pid, self.binary)
        return running and (self.started == -1 or start_ticks(self.pid) == self.started)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (all held open until every one is chosen)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def listeners(port: int) -> set[int]:
    """Pids of the processes listening on TCP ``port`` (IPv4 or IPv6), from /proc."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    pids = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in fd_dir.iterdir()):
                pids.add(int(fd_dir.parent.name))
    return pids


def runs_binary(pid: int, binary: Path) -> bool:
    """Whether ``pid`` is a live process started from ``binary``."""
    return _is_ours(pid, binary)


def start(name: str, argv: list[str], *, log: Path, die_with_parent: bool) -> Running:
    """Start ``argv`` detached from our terminal (own session), output to ``log``.

    ``die_with_parent`` asks the kernel to kill it when the starting process dies (used by test
    sessions; ``python -m e2e.cluster up`` leaves the cluster running on purpose).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    _children[process.pid] = process
    started = start_ticks(process.pid)
    return Running(name, process.pid, log, Path(argv[0]), -1 if started is None else started)


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[-1].split()[19])


def exit_status(component: Running) -> str:
    """How a component started by this process ended ("exit code 1", "signal 9"), if known."""
    process = _children.get(component.pid)
    code = None if process is None else process.poll()
    if code is None:
        return "exit status unknown"
    return f"signal {-code}" if code < 0 else f"exit code {code}"


def stop(component: Running, *, grace_s: float = 10.0) -> None:
    """SIGTERM the component's process group, SIGKILL it after ``grace_s``; reap it if ours."""
    if not component.alive():
        _reap(component.pid)
        return
    _signal_group(component.pid, signal.SIGTERM)
    if not _wait_gone(component, grace_s):
        _signal_group(component.pid, signal.SIGKILL)
        _wait_gone(component, 5.0)


def send_signal(component: Running, signum: signal.Signals) -> None:
    """Send `signum` to the component's process group, if it is still ours."""
    if component.alive():
        _signal_group(component.pid, signum)


def wait_until(
    ready: Callable[[], bool], *, timeout_s: float, what: str, watch: tuple[Running, ...] = ()
) -> None:
    """Poll ``ready`` until true; fail early with the log tail if a watched component exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        for component in watch:
            if not component.alive():
                raise ComponentExitedError(
                    f"{component.name} exited ({exit_status(component)}) while waiting for "
                    f"{what}; last log lines:\n{component.log_tail()}"
                )
        time.sleep(0.2)
    tails = "\n".join(f"--- {c.name} ---\n{c.log_tail()}" for c in watch)
    raise TimeoutError(f"{what} not ready after {timeout_s:.0f}s\n{tails}")


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _is_ours(pid: int, binary: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    zombie = stat.rsplit(")", 1)[-1].split()[0] == "Z"
    return not zombie and cmdline.split(b"\0", 1)[0] == str(binary).encode()


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def _wait_gone(component: Running, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(component.pid)
        if not component.alive():
            return True
        time.sleep(0.05)
    return False


def _reap(pid: int) -> None:
    """Collect the exit status of a component we started (others are not our children)."""
    process = _children.get(pid)
    if process is not None and process.poll() is not None:
        del _children[pid]
