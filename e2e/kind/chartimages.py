"""The chart's two images (and the examples' base image), built with no registry.

``Dockerfile.webhook`` and ``Dockerfile.agent`` take their bases as build arguments
(``PYTHON_IMAGE``, ``GCC_IMAGE``) and pip options (``PIP_OPTIONS``); their defaults are the
public images a user with a registry pulls. Here the bases are Debian root filesystems
(``rootfs.py``) and pip installs from a wheelhouse built on the host with the project's own pip
(``--no-index --find-links``). The build context is a copy of just what the Dockerfiles COPY.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from e2e.cluster.settings import REPO_ROOT, Settings
from e2e.kind.dockerd import docker_env
from e2e.kind.rootfs import ensure_rootfs_image
from e2e.kind.steps import run

KIND_DIR = Path(__file__).resolve().parent
DOCKERFILES = {"webhook": KIND_DIR / "Dockerfile.webhook", "agent": KIND_DIR / "Dockerfile.agent"}
#: what the Dockerfiles COPY from the repository
CONTEXT_PATHS = ("pyproject.toml", "README.md", "vgpu_bridge", "native/vgpu")
WHEELHOUSE = "e2e/kind/wheelhouse"
#: the examples' container image; here a Debian root filesystem under that name
EXAMPLES_IMAGE = "ubuntu:24.04"


def wheelhouse(settings: Settings) -> Path:
    """Wheels of the project's dependencies and its build backend, built once per pyproject."""
    digest = hashlib.sha256((REPO_ROOT / "pyproject.toml").read_bytes()).hexdigest()[:12]
    directory = settings.cache_root / "kind-wheelhouse" / digest
    if (directory / "complete").is_file():
        return directory
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(directory)]
    run([*pip, str(REPO_ROOT), "setuptools>=69"])
    for own in directory.glob("vgpu_bridge-*.whl"):
        own.unlink()  # the image builds the project's own wheel from its sources
    (directory / "complete").touch()
    return directory


def build_context(settings: Settings) -> Path:
    context = settings.cache_root / "kind-chart-context"
    shutil.rmtree(context, ignore_errors=True)
    for relative in CONTEXT_PATHS:
        source = REPO_ROOT / relative
        if source.is_dir():
            shutil.copytree(source, context / relative, ignore=shutil.ignore_patterns("build"))
        else:
            (context / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, context / relative)
    shutil.copytree(wheelhouse(settings), context / WHEELHOUSE)
    return context


def build_args(settings: Settings) -> list[str]:
    python = ensure_rootfs_image(settings, "python")
    gcc = ensure_rootfs_image(settings, "gcc")
    return [
        f"--build-arg=PYTHON_IMAGE={python}",
        f"--build-arg=GCC_IMAGE={gcc}",
        "--build-arg=PIP_OPTIONS=--no-index --find-links /wheelhouse",
    ]


def build_chart_images(settings: Settings, images: dict[str, str], *, offline: bool) -> None:
    """``docker build`` each of ``images`` (part -> tag) from its Dockerfile: offline from the
    local bases and the wheelhouse, or (``offline=False``) from the public defaults."""
    context = build_context(settings)
    arguments = [*build_args(settings), "--network=none"] if offline else ["--network=host"]
    for part, tag in images.items():
        command = ["docker", "build", *arguments, "-t", tag]
        run([*command, "-f", str(DOCKERFILES[part]), str(context)], env=docker_env())
    shutil.rmtree(context, ignore_errors=True)


def tag_examples_image(settings: Settings) -> str:
    run(
        ["docker", "tag", ensure_rootfs_image(settings, "python"), EXAMPLES_IMAGE], env=docker_env()
    )
    return EXAMPLES_IMAGE
