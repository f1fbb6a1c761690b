"""Build the chart's two images for each architecture, with no registry.

Each image is ``images/<part>/Dockerfile`` built by the kind tier's private dockerd
(``e2e.kind.dockerd``) with the legacy builder, which sets none of BuildKit's automatic platform
arguments: ``platform_args`` passes the ones the Dockerfiles read. Its stages that RUN
(``FROM --platform=$BUILDPLATFORM``) use local images of the build machine's architecture:
``BUILD_IMAGE`` (the kind tier's Debian python rootfs) and ``GCC_IMAGE`` (a Debian gcc rootfs,
with the aarch64 cross toolchain for arm64 images). The image itself is
``BASE_IMAGE`` plus COPY only; ``BASE_IMAGE`` is a Debian rootfs of the image's architecture,
unpacked from its ``.deb`` files by ``mmdebstrap --variant=extract`` (nothing of it runs) with
its standard library byte-compiled by this machine's Python of the same minor version, loaded as
an image whose config names that architecture. pip installs from a wheelhouse downloaded on the
host for the image's platform (``--only-binary=:all:``).
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import shutil
import sys
import tarfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.cluster.settings import REPO_ROOT, Settings
from e2e.kind.dockerd import docker_env
from e2e.kind.rootfs import SUITE, ensure_rootfs_image, image_exists, imported, mmdebstrap
from e2e.kind.steps import StepError, run

IMAGES_DIR = Path(__file__).resolve().parent
PARTS = ("webhook", "agent")
DOCKERFILES = {part: IMAGES_DIR / part / "Dockerfile" for part in PARTS}
#: the pip extra each image installs
EXTRAS = {"webhook": "webhook", "agent": "node"}
#: what the Dockerfiles COPY from the repository (the wheelhouse is added per architecture)
CONTEXT_PATHS = ("pyproject.toml", "README.md", "vgpu_bridge", "native/vgpu", "images/site.sh")
WHEELHOUSE = "images/wheelhouse"
#: Debian bookworm's python3: the images' interpreter, and the one that byte-compiles for them
PYTHON_VERSION = "3.11"
#: bookworm's glibc is 2.36: the newest manylinux wheels the images can run
GLIBC_MINOR = 36
#: the images' Debian base: python3 and what it needs; docs, manuals and translations left out
BASE_PACKAGES = ("python3", "libstdc++6")  # grpcio's extension needs the C++ runtime
BASE_EXCLUDES = (
    "/usr/share/doc/*",
    "/usr/share/man/*",
    "/usr/share/locale/*",
    "/usr/share/info/*",
    "/usr/lib/*/gconv/*",  # glibc's iconv modules (8 MB): Python has its own codecs
)
#: the bases' PATH (the Dockerfiles set their own)
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: gcc for libvgpu.so of this machine's architecture
GCC_PACKAGES = ("gcc", "make", "libc6-dev")
#: what cross-building libvgpu.so for aarch64 adds (``make -C native/vgpu arm64``)
CROSS_GCC_PACKAGES = ("gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross")
#: the budget of each image, in MB (10**6 bytes), on every architecture
BUDGET_MB = {"webhook": 150, "agent": 250}
LICENSE = "Apache-2.0"
CHART_YAML = REPO_ROOT / "charts" / "vgpu-bridge" / "Chart.yaml"


@dataclass(frozen=True)
class Arch:
    name: str  # Docker's and Debian's name: amd64, arm64
    machine: str  # the name in wheels' platform tags: x86_64, aarch64
    elf_machine: int  # e_machine of its ELF files
    qemu: str | None  # how this (amd64) machine runs its binaries: natively or under qemu-user

    @property
    def platform(self) -> str:
        return f"linux/{self.name}"


ARCHES = {
    "amd64": Arch("amd64", "x86_64", 62, None),
    "arm64": Arch("arm64", "aarch64", 183, "qemu-aarch64"),
}


def pip_platforms(arch: Arch) -> list[str]:
    """pip's ``--platform`` options for wheels that run on bookworm (glibc 2.GLIBC_MINOR) on
    ``arch``, as images/site.sh gives them to pip in the image (``site.sh --platforms``)."""
    env = {"PATH": "/usr/bin:/bin", "TARGETARCH": arch.name, "GLIBC_MINOR": str(GLIBC_MINOR)}
    return run(["sh", str(IMAGES_DIR / "site.sh"), "--platforms"], env=env, quiet=True).split()


def project_version() -> str:
    version: str = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def project_revision() -> str:
    return run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], quiet=True).strip()


def project_source() -> str:
    """The project's address, as the chart gives it (``home``)."""
    home: str = yaml.safe_load(CHART_YAML.read_text())["home"]
    return home


def image_tag(part: str, arch: Arch, version: str) -> str:
    return f"vgpu-bridge-{part}:{version}-{arch.name}"


def requirements() -> list[str]:
    """Every requirement of the images: the project's own and those of the extras they install."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    wanted: list[str] = list(project["dependencies"])
    for extra in sorted(set(EXTRAS.values())):
        wanted += project["optional-dependencies"][extra]
    return [*wanted, *pyproject["build-system"]["requires"]]


def wheelhouse(settings: Settings, arch: Arch) -> Path:
    """Binary wheels of every requirement for ``arch``'s platform, downloaded once per list of
    requirements and platform (any Python 3.11 pip fetches another platform's wheels)."""
    wanted = requirements()
    key = "\n".join([arch.machine, str(GLIBC_MINOR), PYTHON_VERSION, *wanted])
    directory = (
        settings.cache_root / "images-wheelhouse" / hashlib.sha256(key.encode()).hexdigest()[:12]
    )
    if (directory / "complete").is_file():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    abi = "cp" + PYTHON_VERSION.replace(".", "")
    run([
        sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(directory),
        "--only-binary=:all:", *pip_platforms(arch),
        "--python-version", PYTHON_VERSION, "--implementation", "cp",
        "--abi", abi, "--abi", "abi3", "--abi", "none", *wanted,
    ])  # fmt: skip
    (directory / "complete").touch()
    return directory


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Rootfs:
    """A Debian root filesystem: the image name it is loaded as, and its tarball in the cache,
    made by ``mmdebstrap`` with ``options`` when missing."""

    name: str
    tarball: Path
    options: tuple[str, ...]

    def made(self) -> Path:
        if not self.tarball.is_file():
            mmdebstrap(self.tarball, list(self.options))
        return self.tarball


def base_rootfs(settings: Settings, arch: Arch) -> Rootfs:
    """The images' base for ``arch``: Debian's python3 unpacked from its packages (no maintainer
    script runs, so nothing of ``arch`` runs here), the standard library byte-compiled by this
    machine's Python (same minor version: bytecode does not depend on the architecture), and
    ``images/base`` (/etc/passwd and /etc/group naming the webhook's user, 65532)."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" != PYTHON_VERSION:
        raise StepError(
            f"the images' bytecode is compiled by this Python ({sys.version.split()[0]}): "
            f"it must be {PYTHON_VERSION}, the images' Python"
        )
    overlay = IMAGES_DIR / "base"
    files = sorted(p for p in overlay.rglob("*") if p.is_file())
    contents = [f"{p.relative_to(overlay)}={p.read_text()}" for p in files]
    inputs = (SUITE, arch.platform, *BASE_PACKAGES, *BASE_EXCLUDES, PYTHON_VERSION, *contents)
    digest = _digest(*inputs)
    stdlib = f'"$1/usr/lib/python{PYTHON_VERSION}"'
    compile_stdlib = (
        f"{sys.executable} -m compileall -q -j 0 --invalidation-mode unchecked-hash"
        f' -s "$1" -p / {stdlib}'
    )
    options = (
        "--variant=extract",
        f"--arch={arch.name}",
        f"--include={','.join(BASE_PACKAGES)}",
        *[f"--dpkgopt=path-exclude={pattern}" for pattern in BASE_EXCLUDES],
        f"--extract-hook=sync-in {overlay} /",
        f"--extract-hook={compile_stdlib}",
    )
    return Rootfs(
        f"vgpu-bridge-images/base-{arch.name}:{digest}",
        settings.cache_root / "images-rootfs" / f"base-{arch.name}-{digest}.tar",
        options,
    )


def base_image(settings: Settings, arch: Arch) -> str:
    """``base_rootfs`` loaded as an image whose config names ``arch``."""
    rootfs = base_rootfs(settings, arch)
    if not image_exists(rootfs.name):
        load_rootfs(rootfs.made(), rootfs.name, arch)
    return rootfs.name


def load_rootfs(tarball: Path, name: str, arch: Arch) -> None:
    """``docker load`` the root filesystem ``tarball`` as image ``name`` for ``arch``:
    ``docker import`` records the daemon's own architecture whatever its ``--platform`` says,
    and an image built FROM a base inherits the base's."""
    archive = rootfs_image_archive(tarball, name, arch)
    try:
        run(["docker", "load", "-i", str(archive)], env=docker_env())
    finally:
        archive.unlink()


def rootfs_image_archive(tarball: Path, name: str, arch: Arch) -> Path:
    """A ``docker save`` archive (beside ``tarball``) of one image, ``name``: ``tarball`` as its
    one layer, a config naming ``arch``."""
    digest = hashlib.sha256()
    with tarball.open("rb") as layer:
        while chunk := layer.read(1 << 20):
            digest.update(chunk)
    config = json.dumps({
        "architecture": arch.name,
        "os": "linux",
        "config": {"Env": [f"PATH={BASE_PATH}"]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{digest.hexdigest()}"]},
        "history": [{"created_by": "mmdebstrap --variant=extract (images/build.py)"}],
    }).encode()  # fmt: skip
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name], "Layers": ["layer.tar"]}])
    archive = tarball.with_suffix(".image.tar")
    with tarfile.open(archive, "w") as image:
        image.add(tarball, arcname="layer.tar")
        for member, content in ((config_name, config), ("manifest.json", manifest.encode())):
            info = tarfile.TarInfo(member)
            info.size = len(content)
            image.addfile(info, io.BytesIO(content))
    return archive


def gcc_rootfs(settings: Settings, *, cross: bool) -> Rootfs:
    """gcc and make of this machine's architecture; with ``cross``, also Debian's aarch64 cross
    toolchain (the kind tier's amd64-only images go without it: a minute less cold)."""
    packages = (*GCC_PACKAGES, *(CROSS_GCC_PACKAGES if cross else ()))
    digest = _digest(SUITE, *packages)
    return Rootfs(
        f"vgpu-bridge-images/build-gcc:{digest}",
        settings.cache_root / "images-rootfs" / f"build-gcc-{digest}.tar",
        ("--variant=minbase", f"--include={','.join(packages)}"),
    )


def gcc_image(settings: Settings, *, cross: bool) -> str:
    rootfs = gcc_rootfs(settings, cross=cross)
    return imported(rootfs.name, rootfs.tarball, list(rootfs.options))


def build_context(settings: Settings, arches: Sequence[Arch], *, offline: bool) -> Path:
    """A copy of what the Dockerfiles COPY; offline, with the wheels of each of ``arches`` in
    the wheelhouse (pip takes those of its target's platform)."""
    context = settings.cache_root / f"images-context-{'-'.join(arch.name for arch in arches)}"
    shutil.rmtree(context, ignore_errors=True)
    for relative in (*CONTEXT_PATHS, *(() if offline else (WHEELHOUSE,))):
        source = REPO_ROOT / relative
        if source.is_dir():
            ignored = shutil.ignore_patterns("build", "build-*", "__pycache__")
            shutil.copytree(source, context / relative, ignore=ignored)
        else:
            (context / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, context / relative)
    if offline:
        for arch in arches:
            shutil.copytree(wheelhouse(settings, arch), context / WHEELHOUSE, dirs_exist_ok=True)
    return context


@dataclass(frozen=True)
class Labels:
    version: str
    revision: str
    source: str

    @classmethod
    def of_checkout(cls) -> Labels:
        return cls(project_version(), project_revision(), project_source())

    def oci(self) -> dict[str, str]:
        prefix = "org.opencontainers.image."
        return {
            prefix + "version": self.version,
            prefix + "revision": self.revision,
            prefix + "source": self.source,
            prefix + "licenses": LICENSE,
        }


def build_machine() -> Arch:
    """The architecture of this machine, which runs the build stages."""
    machine = platform.machine()
    for arch in ARCHES.values():
        if arch.machine == machine:
            return arch
    raise StepError(f"the images are built on amd64 or arm64, not on {machine}")


def platform_args(arch: Arch) -> dict[str, str]:
    """What BuildKit would set for a build of ``arch`` on this machine, and the Dockerfiles read:
    the legacy builder sets no automatic argument (an unset ``$BUILDPLATFORM`` in a FROM's
    --platform fails to parse)."""
    return {"BUILDPLATFORM": build_machine().platform, "TARGETARCH": arch.name}


def build_args(settings: Settings, arch: Arch, labels: Labels, *, offline: bool) -> list[str]:
    """The platform arguments; offline, the local bases and the wheelhouse, else the
    Dockerfiles' public defaults (amd64 only: what the kind tier builds)."""
    values = {"VERSION": labels.version, "REVISION": labels.revision, "SOURCE": labels.source}
    values |= platform_args(arch)
    if offline:
        values |= {
            "BUILD_IMAGE": ensure_rootfs_image(settings, "python"),
            "GCC_IMAGE": gcc_image(settings, cross=arch.name != "amd64"),
            "BASE_IMAGE": base_image(settings, arch),
            "PYTHON_VERSION": PYTHON_VERSION,
            "GLIBC_MINOR": str(GLIBC_MINOR),
            "PIP_OPTIONS": "--no-index --find-links /wheelhouse",
        }
    elif arch.name != "amd64":
        raise StepError(f"{arch.name}: only offline builds (local bases) cross-build")
    return [f"--build-arg={key}={value}" for key, value in values.items()]


def build_images(
    settings: Settings, arch: Arch, tags: dict[str, str], labels: Labels, *, offline: bool = True
) -> None:
    """``docker build`` each of ``tags`` (part -> tag) for ``arch`` in the running dockerd (the
    kind tier's): offline (``--network=none``) from local bases and the wheelhouse, or
    (``offline=False``) from the Dockerfiles' public defaults with the host's network."""
    context = build_context(settings, [arch], offline=offline)
    network = "--network=none" if offline else "--network=host"
    arguments = [*build_args(settings, arch, labels, offline=offline), network]
    try:
        for part, tag in tags.items():
            command = ["docker", "build", *arguments, "-t", tag, "-f", str(DOCKERFILES[part])]
            run([*command, str(context)], env=docker_env())
    finally:
        shutil.rmtree(context, ignore_errors=True)
