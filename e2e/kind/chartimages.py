"""The chart's two images (and the examples' base image), built with no registry.

The images are what ``make images`` ships: ``images/webhook/Dockerfile`` and
``images/agent/Dockerfile`` built by the same code (``images.build``), here for amd64 only and
tagged as the kind values name them. Offline their bases are local Debian root filesystems and
pip installs from a wheelhouse downloaded on the host; with ``offline=False`` (a machine with a
registry) the Dockerfiles' public defaults are used.
"""

from __future__ import annotations

from e2e.cluster.settings import Settings
from e2e.kind.dockerd import docker_env
from e2e.kind.rootfs import ensure_rootfs_image
from e2e.kind.steps import run
from images.build import ARCHES, DOCKERFILES, Labels, build_images

__all__ = ["DOCKERFILES", "EXAMPLES_IMAGE", "build_chart_images", "tag_examples_image"]
#: the examples' container image; here a Debian root filesystem under that name
EXAMPLES_IMAGE = "ubuntu:24.04"


def build_chart_images(settings: Settings, images: dict[str, str], *, offline: bool) -> None:
    """``docker build`` each of ``images`` (part -> tag) for amd64, as ``make images`` does."""
    build_images(settings, ARCHES["amd64"], images, Labels.of_checkout(), offline=offline)


def tag_examples_image(settings: Settings) -> str:
    run(
        ["docker", "tag", ensure_rootfs_image(settings, "python"), EXAMPLES_IMAGE], env=docker_env()
    )
    return EXAMPLES_IMAGE
