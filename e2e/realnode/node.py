"""A real worker node on this machine: containerd + runc + the kubelet, joined to a local cluster.

``start_node`` brings it up against a ``LocalCluster`` and returns a ``RealNode``; ``down`` tears
down whatever a node left (by pid file, by the node's cgroup, by the node's paths), whether it
stopped cleanly or its starter crashed. Nothing outside the node's ``Layout`` is written, except the
kernel tunables the kubelet sets (saved first, restored by ``down``) and the node's cgroups.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from e2e.cluster.client import ApiError, KubeClient
from e2e.cluster.controlplane import LocalCluster
from e2e.cluster.processes import free_port
from e2e.realnode import containerd, driver_root, host, kubelet
from e2e.realnode.build import NativeParts
from e2e.realnode.host import Layout
from e2e.realnode.images import ImageSpec, WrittenImage, shared_libraries, write_oci_archive

TEST_IMAGE = "localhost/vgpu-realnode-probe:1"
CUDA_IMAGE = "localhost/vgpu-realnode-cuda:1"
#: file name prefixes of the driver's user-space libraries: never in the CUDA image (a pod gets
#: them from its claim), even where the host that builds the image has a driver installed
DRIVER_LIBRARY_PREFIXES = ("libcuda.", "libnvidia-")
#: argv[0] basenames of the processes the node starts (checked together with our paths)
OUR_PROGRAMS = frozenset({"containerd", "containerd-shim-runc-v2", "vgpu-k8s", "runc"})
START_TIMEOUT_S = 120.0


class NodeStartError(RuntimeError):
    """A component of the node did not come up; the message carries its log tail."""


@dataclass
class Component:
    name: str
    pid: int
    binary: Path
    log: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        if self.process is not None:
            # our own unreaped child: its pid cannot be reused. (Its /proc cmdline is not a test:
            # right after execve, before the kernel has set up the new argv, it reads empty.)
            return self.process.poll() is None
        return _runs(self.pid, self.binary)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class RealNode:
    layout: Layout
    bin_dir: Path
    kubelet_binary: Path
    name: str
    components: list[Component]
    images: dict[str, WrittenImage]
    timings: dict[str, float]
    native: NativeParts | None = None
    #: the stand-in driver install of a host-install layout (with ``native`` only)
    driver_root: Path | None = None

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)


def start_node(
    cluster: LocalCluster,
    *,
    bin_dir: Path,
    kubelet_binary: Path,
    layout: Layout | None = None,
    node_name: str = kubelet.NODE_NAME,
    native: NativeParts | None = None,
) -> RealNode:
    """containerd, images, kubelet; waits until the Node is Ready. On failure tears down first."""
    layout = layout or Layout()
    down(layout, bin_dir, client=None)
    node = RealNode(layout, bin_dir, kubelet_binary, node_name, [], {}, {}, native)
    try:
        _start(node, cluster, native)
    except BaseException:
        save_logs(layout)
        down(layout, bin_dir, client=cluster.client(), node_name=node_name)
        raise
    return node


def _start(node: RealNode, cluster: LocalCluster, native: NativeParts | None) -> None:
    layout, bin_dir = node.layout, node.bin_dir
    for directory in (layout.root, layout.run, layout.cdi_dir, layout.logs, layout.pod_logs):
        directory.mkdir(parents=True, exist_ok=True)
    host.save_sysctls(layout)
    host.create_cgroup_root(layout)
    if native is not None:
        node.driver_root = install_driver(layout.driver_root, native)

    started = time.monotonic()
    config = containerd.write_files(layout, bin_dir)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    ctd = _launch(node, "containerd", bin_dir / "containerd", ["--config", str(config)], env=env)
    wait_started(
        lambda: layout.containerd_socket.exists() and _ctr_ok(layout, bin_dir),
        what="containerd socket",
        component=ctd,
    )
    node.timings["containerd ready"] = time.monotonic() - started

    started = time.monotonic()
    for image in build_images(layout, bin_dir, native):
        containerd.import_image(layout, bin_dir, image.archive)
        node.images[image.name] = image
    names = containerd.image_names(layout, bin_dir)
    missing = [name for name in node.images if name not in names]
    if missing:
        raise NodeStartError(f"images not listed after import: {missing} (have {names})")
    node.timings["images imported"] = time.monotonic() - started

    started = time.monotonic()
    kubeconfig = kubelet.write_credentials(cluster, layout, node.name)
    kubelet_config = layout.etc / "kubelet.yaml"
    kubelet_config.write_text(
        kubelet.render_config(
            layout, port=free_port(), healthz_port=free_port(), ca_file=cluster.ca_file
        )
    )
    argv = kubelet.argv(
        node.kubelet_binary,
        layout,
        config=kubelet_config,
        kubeconfig=kubeconfig,
        node_name=node.name,
    )
    component = _launch(node, "kubelet", node.kubelet_binary, argv[1:], env=env)
    client = cluster.client()
    wait_started(
        lambda: node_ready(client, node.name),
        what=f"node {node.name} Ready",
        component=component,
    )
    node.timings["kubelet to node Ready"] = time.monotonic() - started


#: where ``save_logs`` copies the node's logs (teardown removes the node's directories)
SAVED_LOGS = Path(__file__).resolve().parents[2] / ".cache" / "e2e-artifacts" / "realnode"


def save_logs(layout: Layout) -> Path:
    """Copy the components' logs out of the node's directories before teardown removes them."""
    SAVED_LOGS.mkdir(parents=True, exist_ok=True)
    for log in layout.logs.glob("*.log"):
        shutil.copy2(log, SAVED_LOGS / log.name)
    return SAVED_LOGS


def install_driver(top: Path, native: NativeParts) -> Path:
    """The fake driver of native/vgpu's tests installed under ``top`` as a driver of
    ``driver_root.DRIVER_VERSION`` (driver_root.py); returns ``top``."""
    driver_root.install(
        top,
        libraries={"libcuda.so.1": native.fake_cuda, "libnvidia-ml.so.1": native.fake_nvml},
        binaries={"nvidia-smi": native.nvidia_smi},
    )
    return top


def cuda_image_spec(native: NativeParts) -> ImageSpec:
    """The CUDA image: cudaprobe (its entrypoint) and cudalaunch, plus the libraries that they
    and libvgpu.so need, but no driver library and no LD_LIBRARY_PATH: as in a plain CUDA image
    run without an NVIDIA runtime, libcuda.so.1 comes from the claim's CDI mounts or not at all
    (libvgpu is not in it either: CDI mounts it)."""
    files = {
        "/cudaprobe": native.cudaprobe,
        "/cudalaunch": native.cudalaunch,
        **shared_libraries(native.cudaprobe),
        **shared_libraries(native.cudalaunch),
        **shared_libraries(native.libvgpu),
    }
    kept = {
        path: host_file
        for path, host_file in files.items()
        if not Path(path).name.startswith(DRIVER_LIBRARY_PREFIXES)
    }
    return ImageSpec(
        CUDA_IMAGE, entrypoint=("/cudaprobe",), files=kept, env=("PATH=/usr/bin:/bin",)
    )


def build_images(
    layout: Layout, bin_dir: Path, native: NativeParts | None = None
) -> list[WrittenImage]:
    """The sandbox image (static pause), the test image (dynamic probe + its loader/libc) and,
    given ``native``, the CUDA image (``cuda_image_spec``)."""
    out = layout.root / "images"
    probe = bin_dir / "probe"
    images = []
    if native is not None:
        images.append(write_oci_archive(cuda_image_spec(native), out / "cuda.tar"))
    return [
        *images,
        write_oci_archive(
            ImageSpec(
                containerd.SANDBOX_IMAGE,
                entrypoint=("/pause",),
                files={"/pause": bin_dir / "pause"},
            ),
            out / "pause.tar",
        ),
        write_oci_archive(
            ImageSpec(
                TEST_IMAGE,
                entrypoint=("/probe",),
                files={"/probe": probe, **shared_libraries(probe)},
            ),
            out / "probe.tar",
        ),
    ]


def node_ready(client: KubeClient, name: str) -> bool:
    try:
        node = client.get(f"/api/v1/nodes/{name}")
    except ApiError:
        return False
    conditions = node.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# --- processes ------------------------------------------------------------------------------------


def _launch(
    node: RealNode, name: str, binary: Path, args: list[str], *, env: dict[str, str]
) -> Component:
    log = node.layout.logs / f"{name}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    component = Component(name, process.pid, binary, log, process)
    node.components.append(component)
    record_pids(node)
    return component


def record_pids(node: RealNode) -> None:
    state = [{"name": c.name, "pid": c.pid, "binary": str(c.binary)} for c in node.components]
    node.layout.pids.write_text(json.dumps(state))


def wait_started(ready: Callable[[], bool], *, what: str, component: Component) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if ready():
            return
        if not component.alive():
            code = None if component.process is None else component.process.poll()
            how = f"signal {-code}" if code is not None and code < 0 else f"status {code}"
            raise NodeStartError(
                f"{component.name} exited ({how}) while waiting for {what}; log tail:\n"
                f"{component.log_tail()}"
            )
        time.sleep(0.25)
    raise NodeStartError(
        f"{what}: not after {START_TIMEOUT_S:.0f}s; {component.name} log tail:\n"
        f"{component.log_tail()}"
    )


def _ctr_ok(layout: Layout, bin_dir: Path) -> bool:
    try:
        containerd.ctr(layout, bin_dir, "version", timeout_s=5.0)
    except (RuntimeError, subprocess.TimeoutExpired):
        return False
    return True


def _runs(pid: int, binary: Path) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return argv0 == str(binary).encode() and stat.rsplit(")", 1)[-1].split()[0] != "Z"


def our_processes(layout: Layout) -> set[int]:
    """Live processes the node started: one of our programs whose command line names our paths,
    plus everything in the node's cgroup subtree (pods, sandboxes)."""
    found = set()
    for pid in host.processes_mentioning(str(layout.root)) | host.processes_mentioning(
        str(layout.run)
    ):
        with contextlib.suppress(OSError):
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
            if Path(argv0.decode(errors="replace")).name in OUR_PROGRAMS:
                found.add(pid)
    return found | host.cgroup_pids(layout)


# --- teardown -------------------------------------------------------------------------------------


@dataclass
class Teardown:
    """What ``down`` did and what it could not undo (empty lists: the host is as before)."""

    stopped: list[str] = field(default_factory=list)
    sysctls_restored: dict[str, tuple[str, str]] = field(default_factory=dict)
    left_processes: list[int] = field(default_factory=list)
    left_mounts: list[str] = field(default_factory=list)
    left_cgroups: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.left_processes or self.left_mounts or self.left_cgroups)

    def lines(self) -> list[str]:
        lines = [f"stopped: {', '.join(self.stopped) or 'nothing'}"]
        for key, (found, restored) in self.sysctls_restored.items():
            lines.append(f"sysctl {key.replace('/', '.')}: {found} -> {restored}")
        if self.left_processes:
            lines.append(f"LEFT processes: {self.left_processes}")
        if self.left_mounts:
            lines.append(f"LEFT mounts: {self.left_mounts}")
        if self.left_cgroups:
            lines.append(f"LEFT cgroups: {self.left_cgroups}")
        lines += [f"note: {note}" for note in self.notes]
        return lines


def down(
    layout: Layout,
    bin_dir: Path,
    *,
    client: KubeClient | None,
    node_name: str = kubelet.NODE_NAME,
) -> Teardown:
    """Stop and remove everything of the node; safe to call any time, also after a crash."""
    result = Teardown()
    recorded = _read_pids(layout)
    kubelet_entry = next((c for c in recorded if c.name == "kubelet"), None)
    if kubelet_entry is not None and kubelet_entry.alive():
        _stop(kubelet_entry)
        result.stopped.append("kubelet")
    if layout.containerd_socket.exists() and _ctr_ok(layout, bin_dir):
        result.notes += containerd.remove_all_containers(layout, bin_dir)
    for entry in recorded:
        if entry.name != "kubelet" and entry.alive():
            _stop(entry)
            result.stopped.append(entry.name)
    leftovers = our_processes(layout)
    if leftovers:
        result.stopped.append(f"{len(leftovers)} leftover process(es)")
        result.left_processes = sorted(host.kill_and_wait(leftovers))
    result.left_mounts = host.unmount_all(layout.run, layout.root)
    result.notes += driver_root.release_directories(layout.created_dirs)
    result.left_cgroups = host.remove_cgroups(layout)
    result.sysctls_restored = host.restore_sysctls(layout)
    if client is not None:
        with contextlib.suppress(ApiError, OSError):
            client.delete(f"/api/v1/nodes/{node_name}")
    if not result.left_mounts:
        for directory in (layout.run, layout.root):
            result.notes += remove_tree(directory)
    else:
        result.notes.append("directories kept: mounts are left below them")
    return result


def remove_tree(top: Path) -> list[str]:
    """``rm -rf top``, refused while anything is mounted below it (per /proc/self/mountinfo; a bind
    mount of the same filesystem looks like a plain directory to ``os.path.ismount``), since
    deleting through a mount would delete the mounted files."""
    if not top.exists():
        return []
    mounted = host.mounts_under(top)
    if mounted:
        return [f"{top} kept: mounts below it: {mounted}"]
    shutil.rmtree(top)
    return []


def _stop(component: Component, grace_s: float = 15.0) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(component.pid, 15)
    deadline = time.monotonic() + grace_s
    while component.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    if component.alive():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(component.pid, 9)
        host.kill_and_wait({component.pid}, timeout_s=5.0)
    if component.process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            component.process.wait(timeout=5.0)


def stop_component(node: RealNode, name: str) -> None:
    """Stop one component the node started (e.g. the agent, to start it again with other flags)
    and forget it."""
    component = node.component(name)
    _stop(component)
    node.components.remove(component)
    record_pids(node)


def _read_pids(layout: Layout) -> list[Component]:
    try:
        state = json.loads(layout.pids.read_text())
    except (OSError, ValueError):
        return []
    return [
        Component(entry["name"], int(entry["pid"]), Path(entry["binary"]), layout.logs)
        for entry in state
    ]


def stop_node(node: RealNode, client: KubeClient | None) -> Teardown:
    """``down`` for a node started by this process (its Popen objects get reaped too)."""
    stopped = []
    for component in reversed(node.components):
        if component.name == "kubelet" and component.alive():
            _stop(component)
            stopped.append(component.name)
    result = down(node.layout, node.bin_dir, client=client, node_name=node.name)
    result.stopped[:0] = stopped
    for component in node.components:
        if component.process is not None:
            component.process.poll()  # reap
    return result
