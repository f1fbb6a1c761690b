"""Where HAMi's own example manifests are read from: they are not ours to commit.

In order: the directory ``VGPU_BRIDGE_UPSTREAM_EXAMPLES`` names; the reference checkout beside
this repository (``../shared/upstream-examples/hami``); the one beside the checkout this one was
cloned from, when its origin is a directory on this machine (``git clone . /tmp/x`` reads the
same examples as the tree it came from). When none exists the first place beside the repository
is returned, so a test's error names where the examples belong.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from e2e.cluster.settings import REPO_ROOT

VARIABLE = "VGPU_BRIDGE_UPSTREAM_EXAMPLES"
BESIDE = Path("shared") / "upstream-examples" / "hami"


def origin_checkout(repo: Path = REPO_ROOT) -> Path | None:
    """The local directory ``repo`` was cloned from, or None (a URL, no git, no origin)."""
    try:
        url = subprocess.run(
            ["git", "-C", str(repo), "config", "--get", "remote.origin.url"],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = Path(url.removeprefix("file://"))
    return path if url and path.is_absolute() and path.is_dir() else None


def hami_examples(environ: Mapping[str, str] = os.environ, repo: Path = REPO_ROOT) -> Path:
    """The directory of HAMi's example manifests (see the module's docstring)."""
    if environ.get(VARIABLE):
        return Path(environ[VARIABLE])
    beside = repo.parent / BESIDE
    if beside.is_dir():
        return beside
    origin = origin_checkout(repo)
    if origin is not None and (origin.parent / BESIDE).is_dir():
        return origin.parent / BESIDE
    return beside
