"""The previous release, built from the repository's own history (issue 38).

Day-two scenarios (upgrade, downgrade) compare this tree with the release before it. That
release is a commit of this repository, named once here (the next release moves it). Its two
images are built by *its own* build code and Dockerfiles (``images/build.py`` of that commit, run
from a checkout made by ``git archive`` outside the repository, so nothing of it can be committed
or picked up by this tree's tools), in the kind tier's dockerd, tagged ``prev-<commit>`` and reused
while that tag exists; its chart is the checkout's ``charts/vgpu-bridge``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.settings import REPO_ROOT, Settings
from e2e.kind.dockerd import docker_env
from e2e.kind.rootfs import image_exists
from e2e.kind.steps import StepError, run

#: HEAD before issue 38; the chart there says 0.1.0 (unreleased)
PREVIOUS_RELEASE = "fdf5730"
PARTS = ("webhook", "agent")
#: what ``images/build.py`` of the release runs, in its checkout: its own Dockerfiles and pins
BUILD_SCRIPT = """
import sys
from e2e.cluster.settings import Settings
from images.build import ARCHES, Labels, build_images
tags = dict(arg.split("=", 1) for arg in sys.argv[1:])
build_images(Settings.from_env(), ARCHES["amd64"], tags, Labels.of_checkout(), offline=True)
"""


@dataclass(frozen=True)
class Release:
    """A release checked out outside the repository: its images and its chart."""

    commit: str
    checkout: Path

    @property
    def tag(self) -> str:
        return f"prev-{self.commit}"

    def image(self, part: str) -> str:
        """The name ``kind load`` keeps it under (values: registry docker.io/library)."""
        return f"vgpu-bridge-{part}:{self.tag}"

    @property
    def chart(self) -> Path:
        return self.checkout / "charts" / "vgpu-bridge"

    def helm_values(self) -> list[str]:
        """``--set`` options that point the chart (with the kind values) at these images."""
        return ["--set", f"image.tag={self.tag}"]


def checkout_dir(settings: Settings, commit: str) -> Path:
    return settings.cache_root / "releases" / commit


def full_commit(commit: str) -> str:
    return run(["git", "-C", str(REPO_ROOT), "rev-parse", f"{commit}^{{commit}}"], quiet=True)


def checked_out(settings: Settings, commit: str = PREVIOUS_RELEASE) -> Release:
    """The release's files under the cache: a detached ``git worktree`` (its build code labels
    the images with ``git rev-parse HEAD``), made once per commit and never inside the
    repository's tree, so ``git add`` can never pick it up."""
    directory = checkout_dir(settings, commit)
    stamp = directory / ".vgpu-bridge-release"
    if not stamp.is_file():
        if directory.exists():
            run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(directory)])
        run(["git", "-C", str(REPO_ROOT), "worktree", "prune"], quiet=True)
        directory.parent.mkdir(parents=True, exist_ok=True)
        run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(directory), commit])
        stamp.write_text(full_commit(commit))
    return Release(commit, directory)


def build_release_images(settings: Settings, release: Release) -> list[str]:
    """Both images of ``release`` (built by its own ``images/build.py`` unless already tagged in
    the kind tier's dockerd, which must run); their names."""
    images = [release.image(part) for part in PARTS]
    if all(image_exists(image) for image in images):
        print(f"release {release.commit}: images reused ({', '.join(images)})", flush=True)
        return images
    tags = [f"{part}={release.image(part)}" for part in PARTS]
    env = {**os.environ, **docker_env(), "PYTHONPATH": str(release.checkout)}
    env["VGPU_BRIDGE_CACHE"] = str(settings.cache_root)  # its wheelhouse and bases are ours
    print(f"+ (in {release.checkout}) images/build.py {' '.join(tags)}", flush=True)
    done = subprocess.run(
        [sys.executable, "-c", BUILD_SCRIPT, *tags],
        cwd=release.checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise StepError(f"release {release.commit}: its images did not build:\n{tail}")
    return images


def previous_release(settings: Settings) -> Release:
    """PREVIOUS_RELEASE checked out and its images built (or reused)."""
    release = checked_out(settings)
    build_release_images(settings, release)
    return release


def load_into_kind(kind_binary: Path, cluster: str, release: Release) -> None:
    """``kind load`` both of the release's images (their tags differ from this tree's ``kind``,
    so moving between the two rolls every pod of the chart)."""
    images = [release.image(part) for part in PARTS]
    run([str(kind_binary), "load", "docker-image", *images, "--name", cluster], env=docker_env())
