"""The NVIDIA driver's user-space files on this node, found once at start for every claim's spec.

A container gets its CUDA stack from its claim alone: the spec bind-mounts the driver's
libraries and binaries, so neither the NVIDIA runtime, a runtime class nor the image has to
provide them (see docs/driver-stack.md). They are found as the toolkit finds them, under the
driver root (`/` on a host install, `/run/nvidia/driver` under GPU Operator's driver container),
which this process may see at another path (the chart mounts it at `/driver-root`):

- the library dir is the first of LIBRARY_DIRS (with the machine's triplet) that holds a
  regular file `libcuda.so.<driver version>`; a candidate reached through a link (`lib64 ->
  usr/lib64` on merged-/usr hosts) is passed over, its files are found under the real dir;
- the libraries are the regular files `<name>.so.<driver version>` there, for LIBRARY_NAMES
  (those present), each known by its ELF SONAME, which must be `<name>.so[.<digits>…]`;
- the binaries are BINARIES, regular files in the first of BINARY_DIRS that has them;
- the device nodes come from `<driver root>/dev` when `nvidiactl` is there (and the root is
  not `/`), else from the host's `/dev`.

A versioned name that is a link, a dir or a FIFO is refused, never followed: in every driver
install those are regular files. Without `libcuda.so.<version>` there is no spec worth writing
(a pod would get a CUDA stack that cannot start), so the agent does not start (DriverRootError).
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from vgpu_bridge.node.elf import ElfError, read_soname
from vgpu_bridge.node.gpus import Gpu, GpuDiscoveryError

TRIPLETS = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
LIBRARY_DIRS = ("usr/lib/{triplet}", "usr/lib64", "lib/{triplet}", "lib64", "usr/lib", "lib")
# The libraries of the compute, utility and video capabilities, as the driver names them.
LIBRARY_NAMES = (
    "libcuda",
    "libcudadebugger",
    "libnvidia-ptxjitcompiler",
    "libnvidia-nvvm",
    "libnvidia-nvvm70",
    "libnvidia-gpucomp",
    "libnvidia-opencl",
    "libnvidia-allocator",
    "libnvidia-pkcs11",
    "libnvidia-pkcs11-openssl3",
    "libnvidia-ml",
    "libnvidia-cfg",
    "libnvcuvid",
    "libnvidia-encode",
    "libnvidia-opticalflow",
)
CUDA_LIBRARY = "libcuda"
# Without these a CUDA pod is broken, so an odd file there stops the agent; any other odd file is
# passed over (said at start) and the container goes without it.
REQUIRED_LIBRARIES = (CUDA_LIBRARY, "libnvidia-ml")
BINARIES = ("nvidia-smi", "nvidia-debugdump")
BINARY_DIRS = ("usr/bin", "bin")
NVML_SONAME = "libnvidia-ml.so.1"  # what pynvml loads
NVML_VERSIONED = re.compile(r"libnvidia-ml\.so\.([0-9]{1,5}(?:\.[0-9]{1,5}){1,3})")
MAX_DIR_ENTRIES = 100_000  # a library dir is listed for NVML's versioned file, this far at most
CONTROL_DEVICE = "dev/nvidiactl"  # its presence under the root says the nodes are there
# What NVML reports: "555.42.06", "570.124.06", "535.54"; it becomes part of file names
DRIVER_VERSION = re.compile(r"[0-9]{1,5}(\.[0-9]{1,5}){1,3}")


class DriverRootError(GpuDiscoveryError):
    """The driver's files cannot be given to containers; the agent cannot start."""


@dataclass(frozen=True, slots=True)
class DriverLibrary:
    """One driver library: where it is under the driver root, and the name loaders ask for."""

    path: str  # relative to the driver root: "usr/lib/x86_64-linux-gnu/libcuda.so.555.42.06"
    soname: str  # "libcuda.so.1"
    name: str  # "libcuda"


@dataclass(frozen=True, slots=True)
class DriverStack:
    """The driver files every claim's spec carries (pure data: specs are built from it)."""

    root: Path  # on the host, as the runtime resolves the spec's host paths
    version: str
    triplet: str
    libraries: tuple[DriverLibrary, ...]
    binaries: tuple[str, ...]  # relative to the root: "usr/bin/nvidia-smi"
    devices_in_root: bool  # device nodes at <root>/dev/…, not /dev/…
    passed_over: tuple[str, ...] = ()  # optional files not given to containers, and why

    def host_path(self, relative: str) -> str:
        return str(self.root / relative)

    @property
    def container_library_dirs(self) -> tuple[str, str]:
        """Where images' loaders look by default: Debian/Ubuntu's, then RHEL/UBI's."""
        return (f"/usr/lib/{self.triplet}", "/usr/lib64")

    def file_mounts(self) -> Iterator[tuple[str, str]]:
        """(host path, container path) of each library under its SONAME in both container
        library dirs (libcuda also as `libcuda.so`, what `-lcuda` links), then each binary in
        /usr/bin."""
        for directory in self.container_library_dirs:
            for library in self.libraries:
                for name in _container_names(library):
                    yield self.host_path(library.path), f"{directory}/{name}"
        for binary in self.binaries:
            yield self.host_path(binary), f"/usr/bin/{PurePosixPath(binary).name}"

    def device_node(self, path: str) -> dict[str, str]:
        """A CDI device node `path` (`/dev/nvidia0`), from the driver root's /dev if there."""
        if not self.devices_in_root:
            return {"path": path}
        return {"path": path, "hostPath": self.host_path(path.lstrip("/"))}


def still_installed(stack: DriverStack, mount: Path) -> bool:
    """The driver's libcuda is still where discovery found it (seen at `mount`): a driver
    upgrade removes the old version's files, and specs naming them would fail every container."""
    cuda = next((lib for lib in stack.libraries if lib.name == CUDA_LIBRARY), None)
    if cuda is None:
        return True
    info = _lstat(mount / cuda.path)
    return info is not None and stat.S_ISREG(info.st_mode)


def _container_names(library: DriverLibrary) -> tuple[str, ...]:
    if library.name == CUDA_LIBRARY:
        return (library.soname, f"{CUDA_LIBRARY}.so")
    return (library.soname,)


def driver_version(gpus: Sequence[Gpu]) -> str:
    """The one driver version the node's GPUs report (NVML's, or the mock list's)."""
    for gpu in gpus:
        if gpu.driver_version is None:
            raise DriverRootError(
                f"GPU {gpu.uuid} reports no driver version, which names the driver's files "
                "(mock GPUs: set driverVersion)"
            )
    versions = sorted({gpu.driver_version for gpu in gpus if gpu.driver_version is not None})
    if len(versions) != 1:
        raise DriverRootError(f"the GPUs report {len(versions)} driver versions: {versions}")
    if not DRIVER_VERSION.fullmatch(versions[0]):
        raise DriverRootError(f"driver version {versions[0]!r} is not like 555.42.06")
    return versions[0]


def discover(*, root: Path, mount: Path, version: str, machine: str) -> DriverStack:
    """The driver's files under `root` (the host's path), read at `mount` (this process's)."""
    triplet = TRIPLETS.get(machine)
    if triplet is None:
        raise DriverRootError(f"machine {machine!r}: driver files are found on {list(TRIPLETS)}")
    library_dir = _library_dir(root=root, mount=mount, version=version, triplet=triplet)
    passed_over: list[str] = []
    return DriverStack(
        root=root,
        version=version,
        triplet=triplet,
        libraries=tuple(
            _libraries(mount, library_dir, version=version, machine=machine, odd=passed_over)
        ),
        binaries=tuple(_binaries(mount, odd=passed_over)),
        devices_in_root=root != Path("/") and _exists(mount / CONTROL_DEVICE),
        passed_over=tuple(passed_over),
    )


def library_dirs(triplet: str) -> tuple[str, ...]:
    return tuple(candidate.format(triplet=triplet) for candidate in LIBRARY_DIRS)


def _library_dir(*, root: Path, mount: Path, version: str, triplet: str) -> str:
    candidates = library_dirs(triplet)
    for candidate in candidates:
        if _is_real_dir(mount, candidate) and _is_regular(
            mount / candidate / f"{CUDA_LIBRARY}.so.{version}"
        ):
            return candidate
    seen = "" if mount == root else f" (seen at {mount})"
    raise DriverRootError(
        f"driver root {root}{seen}: no {CUDA_LIBRARY}.so.{version} (driver version {version}) "
        f"in any of {', '.join(candidates)}: is the driver installed there, at that version?"
    )


def _libraries(
    mount: Path, library_dir: str, *, version: str, machine: str, odd: list[str]
) -> Iterator[DriverLibrary]:
    """The libraries present; an odd optional one is added to `odd` with its reason and
    skipped, an odd required one stops discovery (DriverRootError)."""
    for name in LIBRARY_NAMES:
        relative = f"{library_dir}/{name}.so.{version}"
        try:
            if _is_regular(mount / relative):
                yield DriverLibrary(relative, _soname(mount / relative, name, machine), name)
        except DriverRootError as error:
            if name in REQUIRED_LIBRARIES:
                raise
            odd.append(str(error))


def _soname(path: Path, name: str, machine: str) -> str:
    """The library's SONAME: `<name>.so` and version digits, nothing a path could hide in."""
    try:
        found = read_soname(path, machine=machine)
    except ElfError as error:
        raise DriverRootError(str(error)) from None
    if not re.fullmatch(rf"{re.escape(name)}\.so(\.[0-9]{{1,8}}){{0,4}}", found):
        raise DriverRootError(f"{path}: SONAME {found!r} is not {name}.so[.<version>]")
    return found


def _binaries(mount: Path, *, odd: list[str]) -> Iterator[str]:
    """The binaries present; an odd one is added to `odd` and skipped (none is required)."""
    for binary in BINARIES:
        try:
            found = _first_regular(mount, (f"{directory}/{binary}" for directory in BINARY_DIRS))
        except DriverRootError as error:
            odd.append(str(error))
            continue
        if found is not None:
            yield found


def _first_regular(mount: Path, candidates: Iterable[str]) -> str | None:
    for relative in candidates:
        if _is_real_dir(mount, str(PurePosixPath(relative).parent)) and _is_regular(
            mount / relative
        ):
            return relative
    return None


def _is_real_dir(mount: Path, relative: str) -> bool:
    """Every part of `relative` under `mount` is a dir, none a link."""
    path = mount
    for part in PurePosixPath(relative).parts:
        path = path / part
        info = _lstat(path)
        if info is None or not stat.S_ISDIR(info.st_mode):
            return False
    return True


def _is_regular(path: Path) -> bool:
    """True for a regular file, False when absent; DriverRootError for anything else there."""
    info = _lstat(path)
    if info is None:
        return False
    if not stat.S_ISREG(info.st_mode):
        kind = "a link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        raise DriverRootError(f"{path} is {kind}; the driver installs a regular file there")
    return True


def _exists(path: Path) -> bool:
    return _lstat(path) is not None


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise DriverRootError(f"{path}: {error.strerror}") from None


def preload_nvml(mount: Path, *, machine: str) -> Path:
    """Load the driver root's NVML library into this process, global, before pynvml's own
    `CDLL("libnvidia-ml.so.1")`, which then gets this one by its SONAME (the agent's image has
    none). The library is `nvml_library`'s; DriverRootError when there is none or it fails to
    load (the agent then waits for NVML as on a node without a driver)."""
    path = nvml_library(mount, machine=machine)
    try:
        ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL)
    except OSError as error:
        raise DriverRootError(f"{path}: cannot load: {error}") from None
    return path


def nvml_library(mount: Path, *, machine: str) -> Path:
    """The NVML library under the driver root (as this process sees it), before its version is
    known: in the first library dir that has one, `libnvidia-ml.so.1` when it is a regular
    file or a link to a file beside it, else the highest versioned regular file."""
    triplet = TRIPLETS.get(machine)
    if triplet is None:
        raise DriverRootError(f"machine {machine!r}: driver files are found on {list(TRIPLETS)}")
    candidates = library_dirs(triplet)
    for candidate in candidates:
        if _is_real_dir(mount, candidate):
            found = _nvml_in(mount / candidate)
            if found is not None:
                return found
    raise DriverRootError(
        f"driver root {mount}: no {NVML_SONAME} nor libnvidia-ml.so.<version> "
        f"in any of {', '.join(candidates)}"
    )


def _nvml_in(directory: Path) -> Path | None:
    entry = directory / NVML_SONAME
    info = _lstat(entry)
    if info is not None and stat.S_ISLNK(info.st_mode):
        target = _link_beside(entry)  # what ldconfig made it point at
        info = None if target is None else _lstat(directory / target)
        entry = directory / (target or NVML_SONAME)
    if info is not None and stat.S_ISREG(info.st_mode):
        return entry
    try:
        versions = sorted(_nvml_versions(directory), key=lambda pair: pair[0])
    except OSError as error:
        raise DriverRootError(f"{directory}: {error.strerror}") from None
    return versions[-1][1] if versions else None


def _link_beside(link: Path) -> str | None:
    """The link's target when it names a file in the same dir (never a path out of the root)."""
    try:
        target = os.readlink(link)
    except OSError:
        return None
    return target if "/" not in target and target not in ("", ".", "..") else None


def _nvml_versions(directory: Path) -> Iterator[tuple[tuple[int, ...], Path]]:
    """(version, path) of each `libnvidia-ml.so.<version>` regular file in `directory`."""
    with os.scandir(directory) as entries:
        for count, entry in enumerate(entries):
            if count >= MAX_DIR_ENTRIES:
                raise DriverRootError(f"{directory}: more than {MAX_DIR_ENTRIES} entries")
            found = NVML_VERSIONED.fullmatch(entry.name)
            if found and entry.is_file(follow_symlinks=False):
                yield tuple(int(part) for part in found.group(1).split(".")), Path(entry.path)
