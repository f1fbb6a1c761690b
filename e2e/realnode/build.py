"""Build (or reuse) the real node's runtime: containerd, its runc shim, ctr and runc, plus the C
programs of the images (a static pause and a dynamic probe; the CUDA ones in ``ensure_native``).

The Go binaries come from their own modules through the Go proxy (``go install pkg@version``, each
module with its own go.mod and go.sum; never merged into the Kubernetes tools module), into
``<cache>/realnode-<containerd>-<runc>/bin``. The kubelet is ``vgpu-k8s kubelet`` from the control
plane's tools module (``e2e.cluster.ensure_binary``). runc needs cgo and libseccomp
(``ensure_libseccomp`` installs ``libseccomp-dev`` with apt on a fresh machine).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.settings import Settings
from e2e.gobuild import build_lock, read_stamp
from e2e.progress import INTERVAL_S, command_label, progress

CONTAINERD_VERSION = "v2.3.7"
RUNC_VERSION = "v1.4.4"
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
RUNC_MODULE = "github.com/opencontainers/runc"
CSRC = Path(__file__).resolve().parent / "csrc"
GO_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr", "runc")
C_PROGRAMS = ("pause", "probe")
NATIVE_DIR = Path(__file__).resolve().parents[2] / "native" / "vgpu"
#: what the scenario's image and host need from native/vgpu (built by its own Makefile)
NATIVE_TARGETS = ("build/libvgpu.so", "build/fake/libcuda.so.1", "build/fake/libnvidia-ml.so.1")
#: where the kind tier's CUDA image keeps the fake driver (e2e/kind/cudaimage.py, found through
#: LD_LIBRARY_PATH); the real node's CUDA image has none (its pods get it from the claim)
IMAGE_DRIVER_DIR = "/usr/lib/vgpu-test"


class BuildError(RuntimeError):
    """A build step failed; the message carries the tail of its output."""


@dataclass(frozen=True)
class RuntimeBinaries:
    bin_dir: Path
    reused: bool
    seconds: float
    #: step -> seconds, for the steps that ran (empty when everything was reused)
    steps: dict[str, float]

    def path(self, name: str) -> Path:
        return self.bin_dir / name


def bin_dir(settings: Settings) -> Path:
    return settings.cache_root / f"realnode-{CONTAINERD_VERSION}-{RUNC_VERSION}" / "bin"


def ensure_runtime(settings: Settings) -> RuntimeBinaries:
    """containerd, shim, ctr, runc and the C programs, built when missing or stale (file lock)."""
    directory = bin_dir(settings)
    with build_lock(directory):
        return _ensure_locked(settings, directory)


def _ensure_locked(settings: Settings, directory: Path) -> RuntimeBinaries:
    started = time.monotonic()
    stamp = directory / "realnode.stamp"
    wanted = _wanted_stamp()
    recorded = read_stamp(stamp)
    steps: dict[str, float] = {}
    present = all((directory / name).is_file() for name in (*GO_BINARIES, *C_PROGRAMS))
    if present and all(recorded.get(key) == value for key, value in wanted.items()):
        return RuntimeBinaries(directory, True, time.monotonic() - started, steps)
    go_env = {**os.environ, **settings.go_env, "GOBIN": str(directory)}
    if recorded.get("runc") != wanted["runc"] or not (directory / "runc").is_file():
        ensure_libseccomp()
        steps["runc"] = _run(
            [
                "go",
                "install",
                "-trimpath",
                "-ldflags=-s -w",
                "-tags=seccomp urfave_cli_no_docs",
                f"{RUNC_MODULE}@{RUNC_VERSION}",
            ],
            env={**go_env, "CGO_ENABLED": "1"},
        )
    containerd_missing = any(
        not (directory / name).is_file()
        for name in ("containerd", "ctr", "containerd-shim-runc-v2")
    )
    if recorded.get("containerd") != wanted["containerd"] or containerd_missing:
        packages = [
            f"{CONTAINERD_MODULE}/cmd/{name}@{CONTAINERD_VERSION}"
            for name in ("containerd", "ctr", "containerd-shim-runc-v2")
        ]
        steps["containerd"] = _run(
            ["go", "install", "-trimpath", "-ldflags=-s -w", "-tags=no_btrfs", *packages],
            # static like upstream's release binaries; btrfs (the one cgo piece) is left out
            env={**go_env, "CGO_ENABLED": "0"},
        )
    started_c = time.monotonic()
    _run(["gcc", "-static", "-O2", "-o", str(directory / "pause"), str(CSRC / "pause.c")])
    _run(["gcc", "-O2", "-o", str(directory / "probe"), str(CSRC / "probe.c")])
    steps["c"] = time.monotonic() - started_c
    stamp.write_text(json.dumps({**wanted, "steps": steps}))
    return RuntimeBinaries(directory, False, time.monotonic() - started, steps)


@dataclass(frozen=True)
class NativeParts:
    libvgpu: Path
    fake_cuda: Path
    fake_nvml: Path
    cudaprobe: Path
    cudalaunch: Path
    #: the stand-in driver's nvidia-smi (csrc/nvidia_smi.c: dlopens libnvidia-ml.so.1)
    nvidia_smi: Path


#: the CUDA image's programs (csrc/<name>.c), linked against the fake libcuda.so.1
CUDA_PROGRAMS = ("cudaprobe", "cudalaunch")


def ensure_native(runtime: RuntimeBinaries) -> NativeParts:
    """libvgpu.so and the fake driver (``make -C native/vgpu``, which knows when they are stale),
    the ``CUDA_PROGRAMS`` linked against the fake libcuda.so.1 (its SONAME in DT_NEEDED, no
    RUNPATH: in a pod the loader finds it where the claim's CDI spec mounts it, on its default
    path) and the stand-in nvidia-smi."""
    _run(["make", "-C", str(NATIVE_DIR), "--no-print-directory", *NATIVE_TARGETS])
    libvgpu, fake_cuda, fake_nvml = (NATIVE_DIR / target for target in NATIVE_TARGETS)
    for name in CUDA_PROGRAMS:
        _run(
            [
                "gcc",
                "-O2",
                "-pthread",
                "-o",
                str(runtime.path(name)),
                str(CSRC / f"{name}.c"),
                f"-L{fake_cuda.parent}",
                "-l:libcuda.so.1",
            ]
        )
    nvidia_smi = runtime.path("nvidia-smi")
    _run(["gcc", "-O2", "-o", str(nvidia_smi), str(CSRC / "nvidia_smi.c"), "-ldl"])
    cudaprobe, cudalaunch = (runtime.path(name) for name in CUDA_PROGRAMS)
    return NativeParts(libvgpu, fake_cuda, fake_nvml, cudaprobe, cudalaunch, nvidia_smi)


def _wanted_stamp() -> dict[str, str]:
    sha = hashlib.sha256()
    for name in sorted(p.name for p in CSRC.glob("*.c")):
        sha.update(name.encode() + b"\0" + (CSRC / name).read_bytes())
    return {"containerd": CONTAINERD_VERSION, "runc": RUNC_VERSION, "csrc": sha.hexdigest()}


def ensure_libseccomp() -> None:
    """runc's seccomp support links libseccomp: install the Debian dev package if it is missing."""
    if Path("/usr/include/seccomp.h").is_file():
        return
    apt = shutil.which("apt-get")
    if apt is None:
        raise BuildError("runc needs libseccomp-dev (seccomp.h) and there is no apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-q", "libseccomp-dev"]
    with progress("apt-get install libseccomp-dev", total_after_s=INTERVAL_S):
        done = subprocess.run(install, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        _run([apt, "update", "-q"], env=env)
        _run(install, env=env)


def _run(command: list[str], *, env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    with progress(command_label(command), total_after_s=INTERVAL_S):
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, check=False, cwd="/"
        )
    if done.returncode != 0:
        output = (done.stdout + done.stderr)[-4000:]
        raise BuildError(f"{' '.join(command)} failed ({done.returncode}):\n{output}")
    return round(time.monotonic() - started, 1)


def report(result: RuntimeBinaries) -> str:
    if result.reused:
        return f"realnode-bin: warm, reused {result.bin_dir} in {result.seconds:.2f}s"
    steps = ", ".join(f"{name} {seconds:.0f}s" for name, seconds in result.steps.items())
    return f"realnode-bin: built {result.bin_dir} in {result.seconds:.1f}s ({steps})"
