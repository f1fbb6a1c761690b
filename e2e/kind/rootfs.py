"""Debian root filesystems as local Docker images (no registry): ``mmdebstrap`` with the host's
own apt sources, ``docker import``. Two of them: the kind node's (what kind's base image
installs) and a Python one that builds the chart's images (``images/build.py`` makes the gcc
one that builds libvgpu.so: amd64 only here, without the aarch64 cross toolchain). Each tarball
is cached under ``<cache>/kind-rootfs/`` by a hash of its package list."""

from __future__ import annotations

import hashlib
from pathlib import Path

from e2e.cluster.settings import Settings
from e2e.kind.dockerd import docker_env
from e2e.kind.steps import StepError, run

SUITE = "bookworm"
SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
ROOTFS_PACKAGES = {
    # what kind's images/base/Dockerfile installs, less fuse-overlayfs, NFS and iSCSI
    "node": (
        "systemd systemd-sysv conntrack iptables nftables iproute2 ethtool util-linux mount kmod"
        " libseccomp2 pigz bash ca-certificates curl jq procps socat e2fsprogs"
    ),
    "python": "python3 python3-pip ca-certificates",
}


def image_name(kind: str) -> str:
    digest = hashlib.sha256(f"{SUITE} {ROOTFS_PACKAGES[kind]}".encode()).hexdigest()[:12]
    return f"vgpu-bridge-kind/rootfs-{kind}:{digest}"


def _tarball_and_options(settings: Settings, kind: str) -> tuple[Path, list[str]]:
    name = image_name(kind)
    tarball = settings.cache_root / "kind-rootfs" / (name.split("/")[1].replace(":", "-") + ".tar")
    packages = ",".join(ROOTFS_PACKAGES[kind].split())
    return tarball, ["--variant=minbase", f"--include={packages}"]


def ensure_rootfs_image(settings: Settings, kind: str) -> str:
    """The Docker image of one Debian root filesystem, made when missing; returns its name."""
    return imported(image_name(kind), *_tarball_and_options(settings, kind))


def rootfs_tarball(settings: Settings, kind: str) -> Path:
    """The tarball of one Debian root filesystem, made when missing (no Docker needed: the
    images' BuildKit build takes it as an OCI layout)."""
    tarball, options = _tarball_and_options(settings, kind)
    if not tarball.is_file():
        mmdebstrap(tarball, options)
    return tarball


def imported(name: str, tarball: Path, options: list[str]) -> str:
    """Image ``name``: there already, or ``docker import`` of ``tarball``, which
    ``mmdebstrap(tarball, options)`` makes when it is not cached."""
    if image_exists(name):
        return name
    if not tarball.is_file():
        mmdebstrap(tarball, options)
    run(["docker", "import", str(tarball), name], env=docker_env())
    return name


def mmdebstrap(tarball: Path, options: list[str]) -> None:
    """``mmdebstrap OPTIONS SUITE`` with the host's apt sources into ``tarball``, which appears
    only once it is whole."""
    sources = SOURCES if SOURCES.is_file() else Path("/etc/apt/sources.list")
    if not sources.is_file():
        raise StepError(f"mmdebstrap needs the host's apt sources; neither {SOURCES} nor {sources}")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial.tar")
    run(["mmdebstrap", *options, SUITE, str(partial), str(sources)])
    partial.replace(tarball)


def image_exists(name: str) -> bool:
    try:
        run(["docker", "image", "inspect", name], env=docker_env(), quiet=True)
    except StepError:
        return False
    return True
