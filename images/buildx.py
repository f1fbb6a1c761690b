"""``python -m images.buildx [--out DIR]``: what ``make images-buildx`` runs.

Both images built the way a platform team's CI builds them, one ``docker buildx build --platform
linux/amd64,linux/arm64`` per Dockerfile, here with no registry. Debian 12 packages no buildx,
and docker 20.10's embedded BuildKit (buildx's docker driver) builds one platform per build, so
BuildKit is a host ``buildkitd`` built from its Go module (OCI worker, the realnode tier's runc),
reached by buildx (built from its Go module, a Docker CLI plugin in a private DOCKER_CONFIG)
through buildx's remote driver, on a private socket; stopped after, its cgroups removed.

The images that BUILD_IMAGE, GCC_IMAGE and BASE_IMAGE name are named build contexts
(``--build-context NAME=oci-layout://DIR@DIGEST``): OCI layouts of ``make images``' own Debian
root filesystems, BASE_IMAGE an index of both architectures, so BuildKit picks each target's.
Each image is written as ``DIR/vgpu-bridge-<part>-<version>.oci.tar`` (``--output type=oci``:
one image index of both platforms) and checked per platform without Docker: its config
(architecture, OCI labels, the webhook's user), every ELF file of the target's machine, and the
role's Python run in the unpacked image (chroot on amd64, qemu-user on arm64). Needs root.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.settings import REPO_ROOT, Settings
from e2e.kind.rootfs import rootfs_tarball
from e2e.kind.steps import StepError, run
from e2e.realnode.build import ensure_runtime
from images import oci
from images.build import (
    ARCHES,
    BASE_PATH,
    DOCKERFILES,
    GLIBC_MINOR,
    PARTS,
    PYTHON_VERSION,
    Arch,
    Labels,
    base_rootfs,
    build_context,
    gcc_rootfs,
)
from images.check import (
    WEBHOOK_USER,
    Row,
    add_sizes,
    check_unpacked,
    foreign_elf_files,
    table,
)

BUILDX_MODULE = "github.com/docker/buildx"
BUILDX_VERSION = "v0.38.2"
BUILDKIT_MODULE = "github.com/moby/buildkit"
BUILDKIT_VERSION = "v0.35.0"
PLATFORMS = tuple(arch.platform for arch in ARCHES.values())
RUN_DIR = Path("/run/vgpu-bridge-buildkit")
SOCKET = RUN_DIR / "buildkitd.sock"
#: the build containers' cgroups appear under this name in every hierarchy (removed after)
CGROUP_PARENT = "vgpu-bridge-buildkit"
CGROUP_FS = Path("/sys/fs/cgroup")
BUILDER = "vgpu-bridge"
#: how long buildkitd gets to answer on its socket, and to stop
START_S = 60
STOP_S = 30
#: the named contexts the Dockerfiles' image arguments are given
CONTEXT_NAMES = {
    "BUILD_IMAGE": "vgpu-bridge-build",
    "GCC_IMAGE": "vgpu-bridge-gcc",
    "BASE_IMAGE": "vgpu-bridge-base",
}


def tools_dir(settings: Settings) -> Path:
    return settings.cache_root / f"buildx-{BUILDX_VERSION}-buildkit-{BUILDKIT_VERSION}" / "bin"


def _version_flag(module: str, version: str) -> str:
    return f"-ldflags=-s -w -X {module}/version.Version={version}"


def ensure_tools(settings: Settings) -> Path:
    """``docker-buildx`` and ``buildkitd`` built from their Go modules (once per version)."""
    directory = tools_dir(settings)
    env = {**os.environ, **settings.go_env}
    if not (directory / "docker-buildx").is_file():
        with tempfile.TemporaryDirectory(dir=settings.cache_root) as gobin:
            package = f"{BUILDX_MODULE}/cmd/buildx@{BUILDX_VERSION}"
            version = _version_flag(BUILDX_MODULE, BUILDX_VERSION)
            run(["go", "install", "-trimpath", version, package], env={**env, "GOBIN": gobin})
            directory.mkdir(parents=True, exist_ok=True)
            shutil.move(Path(gobin) / "buildx", directory / "docker-buildx")
    if not (directory / "buildkitd").is_file():
        _build_buildkitd(directory, env)
    return directory


def _build_buildkitd(directory: Path, env: Mapping[str, str]) -> None:
    """buildkit's go.mod has exclude directives, which ``go install module@version`` refuses:
    build it as the main module, from a writable copy of the downloaded module."""
    found = run(
        ["go", "mod", "download", "-json", f"{BUILDKIT_MODULE}@{BUILDKIT_VERSION}"], env=env
    )
    module = Path(json.loads(found)["Dir"])
    with tempfile.TemporaryDirectory(dir=directory.parent) as scratch:
        source = Path(scratch) / "buildkit"
        shutil.copytree(module, source)
        for path in [source, *source.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
        partial = Path(scratch) / "buildkitd"
        version = _version_flag(BUILDKIT_MODULE, BUILDKIT_VERSION)
        command = ["go", "build", "-mod=mod", "-trimpath", version, "-o", str(partial)]
        run([*command, "./cmd/buildkitd"], env=env, cwd=source)
        directory.mkdir(parents=True, exist_ok=True)
        shutil.move(partial, directory / "buildkitd")


def buildkitd_config(runc: Path) -> str:
    """The worker runs ``runc`` under ``CGROUP_PARENT``; its sockets stay in ``RUN_DIR``."""
    return "\n".join([
        "[worker.oci]",
        "  enabled = true",
        f'  binary = "{runc}"',
        f'  defaultCgroupParent = "{CGROUP_PARENT}"',
        '  networkMode = "host"',
        "[worker.containerd]",
        "  enabled = false",
        "[otel]",
        f'  socketPath = "{RUN_DIR / "otel.sock"}"',
        "[cdi]",
        "  disabled = true",
        "",
    ])  # fmt: skip


@contextlib.contextmanager
def buildkitd(settings: Settings, tools: Path, runc: Path) -> Iterator[str]:
    """A host buildkitd on ``SOCKET`` (its state in the cache) while the block runs; stopped
    after, its run directory and cgroups removed. Yields its address."""
    claim_socket(SOCKET)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    config = RUN_DIR / "buildkitd.toml"
    config.write_text(buildkitd_config(runc))
    log_path = settings.cache_root / "state" / "images-buildx" / "buildkitd.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    root = settings.cache_root / "images-buildkit"
    command = [str(tools / "buildkitd"), f"--config={config}", f"--root={root}"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, f"--addr=unix://{SOCKET}"], stdout=log, stderr=subprocess.STDOUT
        )
    print(f"+ buildkitd (private: {SOCKET}, state {root}, log {log_path})", flush=True)
    try:
        _wait_for_socket(process, log_path)
        yield f"unix://{SOCKET}"
    finally:
        _stop(process)
        shutil.rmtree(RUN_DIR, ignore_errors=True)
        for line in remove_cgroups(CGROUP_FS, CGROUP_PARENT):
            print(f"restored: {line}", flush=True)


def claim_socket(path: Path) -> None:
    """Refuse when a buildkitd answers on ``path`` (another make images-buildx); remove the
    socket a killed one left."""
    if not path.exists():
        return
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()
            return
    raise StepError(f"a buildkitd answers on {path}: another make images-buildx runs")


def _wait_for_socket(process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise StepError(f"buildkitd exited ({process.returncode}):\n{tail}")
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as probe:
            probe.connect(str(SOCKET))
            return
        time.sleep(0.2)
    raise StepError(f"buildkitd did not answer on {SOCKET} within {START_S} s (log: {log})")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    print(f"+ kill {process.pid}  # buildkitd", flush=True)


def remove_cgroups(cgroup_fs: Path, parent: str) -> list[str]:
    """Remove ``parent`` (and its empty children) from every hierarchy; what was removed.
    ``cgroup_fs`` itself is a hierarchy under cgroup v2 alone, each dir below it one under v1."""
    removed = []
    hierarchies = [cgroup_fs, *sorted(cgroup_fs.iterdir())] if cgroup_fs.is_dir() else []
    for hierarchy in hierarchies:
        top = hierarchy / parent
        if top.is_symlink() or not top.is_dir():
            continue
        for directory in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if directory.is_dir():
                with contextlib.suppress(OSError):
                    directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
            removed.append(f"cgroup {top}: removed")
    return removed


def layout_of(settings: Settings, name: str, rootfs: Mapping[str, Path]) -> str:
    """``oci-layout://DIR@DIGEST`` of ``rootfs`` (arch -> tarball), written once per set of
    tarballs (their names carry the digest of what they were made from)."""
    key = "+".join(tarball.stem for _, tarball in sorted(rootfs.items()))
    directory = settings.cache_root / "images-oci" / f"{name}-{key}"
    if (directory / "index.json").is_file():
        (top,) = json.loads((directory / "index.json").read_text())["manifests"]
        digest = str(top["digest"])
    else:
        shutil.rmtree(directory, ignore_errors=True)
        created_by = f"mmdebstrap (images/buildx.py: {name})"
        digest = oci.write_layout(directory, rootfs, [f"PATH={BASE_PATH}"], created_by)
    return f"oci-layout://{directory}@{digest}"


def named_contexts(settings: Settings) -> dict[str, str]:
    """Each image argument's named context: this machine's python and gcc rootfs for the build
    stages, both architectures' bases for the image."""
    bases = {arch.name: base_rootfs(settings, arch).made() for arch in ARCHES.values()}
    build = {"amd64": rootfs_tarball(settings, "python")}
    gcc = {"amd64": gcc_rootfs(settings, cross=True).made()}
    return {
        CONTEXT_NAMES["BUILD_IMAGE"]: layout_of(settings, "build", build),
        CONTEXT_NAMES["GCC_IMAGE"]: layout_of(settings, "gcc", gcc),
        CONTEXT_NAMES["BASE_IMAGE"]: layout_of(settings, "base", bases),
    }


def archive_name(part: str, version: str) -> str:
    return f"vgpu-bridge-{part}-{version}.oci.tar"


def buildx_command(
    part: str, contexts: Mapping[str, str], labels: Labels, context_dir: Path, out: Path
) -> list[str]:
    """``docker buildx build`` of one image for both platforms as an OCI archive: the image
    arguments name the named contexts; the platform arguments are BuildKit's own."""
    values = {
        **CONTEXT_NAMES,
        "PYTHON_VERSION": PYTHON_VERSION,
        "GLIBC_MINOR": str(GLIBC_MINOR),
        "PIP_OPTIONS": "--no-index --find-links /wheelhouse",
        "VERSION": labels.version,
        "REVISION": labels.revision,
        "SOURCE": labels.source,
    }
    return [
        "docker", "buildx", "build", f"--builder={BUILDER}", "--progress=plain",
        f"--platform={','.join(PLATFORMS)}", "--network=none",
        *[f"--build-arg={key}={value}" for key, value in values.items()],
        *[f"--build-context={name}={source}" for name, source in contexts.items()],
        "-f", str(DOCKERFILES[part]),
        f"--output=type=oci,dest={out / archive_name(part, labels.version)}",
        str(context_dir),
    ]  # fmt: skip


@contextlib.contextmanager
def docker_config(tools: Path, address: str) -> Iterator[dict[str, str]]:
    """A private DOCKER_CONFIG: buildx as a CLI plugin and the remote builder ``BUILDER``."""
    if shutil.which("docker") is None:
        raise StepError("make images-buildx runs `docker buildx`: the Docker CLI is missing")
    with tempfile.TemporaryDirectory(prefix="vgpu-buildx-") as config:
        plugins = Path(config) / "cli-plugins"
        plugins.mkdir()
        (plugins / "docker-buildx").symlink_to(tools / "docker-buildx")
        env = {**os.environ, "DOCKER_CONFIG": config}
        env.pop("DOCKER_HOST", None)
        create = ["docker", "buildx", "create", f"--name={BUILDER}", "--driver=remote", address]
        run(create, env=env)
        yield env


@dataclass(frozen=True)
class Checked:
    arch: Arch
    line: str
    row: Row


def check_archive(part: str, path: Path, labels: Mapping[str, str]) -> list[Checked]:
    """Each platform of the OCI archive at ``path``: config, ELF machines, the role's Python."""
    with oci.read_archive(path) as archive:
        images = {image.platform: image for image in archive.images()}
        if sorted(images) != sorted(PLATFORMS):
            raise StepError(f"{path}: platforms {sorted(images)}, not {sorted(PLATFORMS)}")
        return [
            check_image(part, archive, images[arch.platform], arch, labels)
            for arch in ARCHES.values()
        ]


def check_image(
    part: str, archive: oci.Archive, image: oci.Image, arch: Arch, labels: Mapping[str, str]
) -> Checked:
    config = image.config.get("config") or {}
    have = config.get("Labels") or {}
    problems = [
        f"label {k}={have.get(k)!r}, not {v!r}" for k, v in labels.items() if have.get(k) != v
    ]
    if image.config.get("architecture") != arch.name:
        problems.append(f"architecture {image.config.get('architecture')}, not {arch.name}")
    user = config.get("User") or None
    if part == "webhook" and user != WEBHOOK_USER:
        problems.append(f"user {user!r}, not {WEBHOOK_USER}")
    sizes: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="vgpu-image-") as scratch:
        root, layer_file = Path(scratch) / "root", Path(scratch) / "layer"
        root.mkdir()
        for name, media_type in image.layers:
            with archive.layer(name, media_type) as layer:
                add_sizes(sizes, layer)
            blob = archive.tar.extractfile(name)
            assert blob is not None
            layer_file.write_bytes(blob.read())
            run(["tar", "-xf", str(layer_file), "-C", str(root)], quiet=True)
        foreign = foreign_elf_files(root, arch)
        if foreign:
            problems.append(f"ELF files of another machine: {', '.join(foreign[:5])}")
        if problems:
            raise StepError(f"{part}/{arch.name}: " + "; ".join(problems))
        line = check_unpacked(part, arch, root, user)
    return Checked(arch, line, Row(part, arch.name, sum(sizes.values()), sizes))


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m images.buildx",
        description="Build both images with docker buildx for linux/amd64 and linux/arm64 "
        "(what `make images-buildx` runs).",
    )
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "dist" / "images", help="default: dist/images"
    )
    return parser.parse_args(list(argv))


def main(argv: Sequence[str]) -> int:
    args = parse(argv)
    settings = Settings.from_env()
    labels = Labels.of_checkout()
    started = time.monotonic()
    rows: list[Row] = []
    if os.geteuid() != 0:
        print("make images-buildx: runs buildkitd and needs root", file=sys.stderr)
        return 1
    try:
        tools = ensure_tools(settings)
        runc = ensure_runtime(settings).bin_dir / "runc"
        contexts = named_contexts(settings)
        context_dir = build_context(settings, list(ARCHES.values()), offline=True)
        args.out.mkdir(parents=True, exist_ok=True)
        try:
            with buildkitd(settings, tools, runc) as address, docker_config(tools, address) as env:
                for part in PARTS:
                    run(buildx_command(part, contexts, labels, context_dir, args.out), env=env)
        finally:
            shutil.rmtree(context_dir, ignore_errors=True)
        for part in PARTS:
            path = args.out / archive_name(part, labels.version)
            for checked in check_archive(part, path, labels.oci()):
                print(f"{path.name} {checked.arch.platform}: {checked.line}", flush=True)
                rows.append(checked.row)
    except StepError as error:
        print(f"make images-buildx: {error}", file=sys.stderr)
        return 1
    print(table(rows))
    print(f"archives in {args.out}; {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
