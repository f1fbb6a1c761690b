"""The tier's own Docker engine: Debian's ``docker.io`` package, started as a private dockerd.

Nothing of it is shared with a Docker the machine may already run: its own socket, pid file and
exec root under ``RUN_DIR``, its data root in the cache (built images stay warm between runs),
no default bridge, no iptables rules, no IP forwarding or masquerading, and every container's
cgroup under ``CGROUP_PARENT``. Where the host's capability bounding set lacks CAP_SYS_RESOURCE
(Firecracker VMs), Docker 20.10 cannot start ``--privileged`` containers (it asks for every
capability); ``RUNTIME_WRAPPER`` then drops that one capability before runc sees the spec.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from e2e.kind.steps import StepError, apt_install

RUN_DIR = Path("/run/vgpu-bridge-kind")
SOCKET = RUN_DIR / "docker.sock"
PIDFILE = RUN_DIR / "docker.pid"
CGROUP_PARENT = "vgpu-bridge-kind"
CAP_SYS_RESOURCE = 24
WRAPPER_NAME = "runc-no-sys-resource"
PACKAGES = {"dockerd": "docker.io", "mmdebstrap": "mmdebstrap"}


def docker_env() -> dict[str, str]:
    """The environment that points the docker CLI (and kind) at the private engine."""
    return {**os.environ, "DOCKER_HOST": f"unix://{SOCKET}"}


def ensure_packages() -> None:
    """Debian's Docker engine and mmdebstrap (apt), when missing."""
    missing = [package for tool, package in PACKAGES.items() if shutil.which(tool) is None]
    if missing:
        apt_install(missing)


def host_lacks_cap_sys_resource(status: str | None = None) -> bool:
    """Whether this process's capability bounding set lacks CAP_SYS_RESOURCE."""
    text = Path("/proc/self/status").read_text() if status is None else status
    line = next(line for line in text.splitlines() if line.startswith("CapBnd:"))
    return not (int(line.split()[1], 16) >> CAP_SYS_RESOURCE) & 1


def dockerd_command(data_root: Path, wrapper: Path | None) -> list[str]:
    command = [
        "dockerd",
        f"--host=unix://{SOCKET}",
        f"--pidfile={PIDFILE}",
        f"--exec-root={RUN_DIR / 'exec'}",
        f"--data-root={data_root}",
        "--storage-driver=overlay2",
        "--bridge=none",
        "--iptables=false",
        "--ip-forward=false",
        "--ip-masq=false",
        "--exec-opt=native.cgroupdriver=cgroupfs",
        f"--cgroup-parent=/{CGROUP_PARENT}",
    ]
    if wrapper is not None:
        command += [f"--add-runtime={WRAPPER_NAME}={wrapper}", f"--default-runtime={WRAPPER_NAME}"]
    return command


def start(data_root: Path) -> int:
    """Start the private dockerd (or find it running) and wait for its API; returns its pid."""
    pid = running_pid()
    if pid is not None:
        return pid
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    data_root.mkdir(parents=True, exist_ok=True)
    wrapper = write_wrapper() if host_lacks_cap_sys_resource() else None
    log = (RUN_DIR / "dockerd.log").open("ab")
    print(f"+ dockerd (private: {SOCKET}, data root {data_root})", flush=True)
    process = subprocess.Popen(
        dockerd_command(data_root, wrapper), stdout=log, stderr=log, start_new_session=True
    )
    _wait_ready(process, docker_env())
    return process.pid


def _wait_ready(process: subprocess.Popen[bytes], env: Mapping[str, str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = (RUN_DIR / "dockerd.log").read_text()[-2000:]
            raise StepError(f"dockerd exited ({process.returncode}):\n{tail}")
        probe = subprocess.run(["docker", "version"], env=dict(env), capture_output=True)
        if probe.returncode == 0:
            return
        time.sleep(0.5)
    raise StepError(f"dockerd did not answer on {SOCKET} within 60s")


def running_pid() -> int | None:
    try:
        pid = int(PIDFILE.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def stop(log_copy: Path) -> None:
    """Stop the private dockerd by its pid (SIGTERM, then SIGKILL after 30 s), wait until the
    process is gone; keep its log at ``log_copy``."""
    pid = running_pid()
    if pid is not None:
        print(f"+ kill {pid}  # the private dockerd", flush=True)
        os.kill(pid, signal.SIGTERM)
        if not _gone(pid, timeout_s=30):
            os.kill(pid, signal.SIGKILL)
            _gone(pid, timeout_s=10)
    if (RUN_DIR / "dockerd.log").is_file():
        log_copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(RUN_DIR / "dockerd.log", log_copy)


def _gone(pid: int, *, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def clean_up_after(data_root: Path) -> list[str]:
    """After dockerd is gone: lazily unmount what a killed one left mounted under its roots
    (deepest first) and remove the run directory; returns the mount points it found."""
    roots = (str(RUN_DIR) + "/", str(data_root) + "/")
    points = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(roots)
    ]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    return points


WRAPPER = """#!{python}
# runc, minus CAP_SYS_RESOURCE: this host's bounding set lacks it, so a spec asking for it fails.
import json, os, sys
ARGS = sys.argv[1:]
def flag(*names):
    for i, arg in enumerate(ARGS):
        for name in names:
            if arg == name and i + 1 < len(ARGS):
                return ARGS[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None
def drop(path, inside_process):
    with open(path) as f:
        doc = json.load(f)
    holder = (doc.get("process") or {{}}) if inside_process else doc
    caps = holder.get("capabilities")
    for name, values in (caps or {{}}).items():
        caps[name] = [c for c in values if c != "CAP_SYS_RESOURCE"]
    with open(path, "w") as f:
        json.dump(doc, f)
if "create" in ARGS or "run" in ARGS:
    drop(os.path.join(flag("--bundle", "-b") or ".", "config.json"), True)
elif "exec" in ARGS and flag("--process", "-p"):
    drop(flag("--process", "-p"), False)
os.execv({runc!r}, [{runc!r}] + ARGS)
"""


def write_wrapper() -> Path:
    runc = shutil.which("runc") or "/usr/sbin/runc"
    path = RUN_DIR / WRAPPER_NAME
    path.write_text(WRAPPER.format(python=sys.executable, runc=runc))
    path.chmod(0o755)
    return path
