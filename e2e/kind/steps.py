"""How the kind tier runs a step: print the command, run it (saying every 30 s that it still
runs), fail with its output's tail."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from e2e.progress import INTERVAL_S, command_label, progress


class StepError(RuntimeError):
    """A step of the kind tier failed; the message names the command and its output's tail."""


def run(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    input_text: str | None = None,
    quiet: bool = False,
) -> str:
    """Run one command (printed first unless ``quiet``, with a progress line every 30 s and its
    time when it took longer); its stdout, or StepError."""
    if not quiet:
        print("+", " ".join(command), flush=True)
    label = command_label(command)
    watch: AbstractContextManager[object] = (
        nullcontext() if quiet else progress(label, total_after_s=INTERVAL_S)
    )
    with watch:
        done = subprocess.run(
            list(command),
            env=None if env is None else dict(env),
            cwd=cwd,
            input=input_text,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-4000:]
        raise StepError(f"{' '.join(command)} failed ({done.returncode}):\n{tail}")
    return done.stdout


def timed(label: str, timings: dict[str, float], started: float) -> None:
    """Record and print how long a step took."""
    timings[label] = round(time.monotonic() - started, 1)
    print(f"== {label}: {timings[label]:.1f}s", flush=True)


def apt_install(packages: Sequence[str]) -> None:
    """Install Debian packages; ``apt-get update`` first when the package lists lack them."""
    apt = shutil.which("apt-get")
    if apt is None:
        raise StepError(f"the kind tier needs {', '.join(packages)} and there is no apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-q", *packages]
    try:
        run(install, env=env)
    except StepError:
        run([apt, "update", "-q"], env=env)
        run(install, env=env)
