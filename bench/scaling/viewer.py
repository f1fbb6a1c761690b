"""Part 4, the viewer: ``kubectl vgpu status`` run as a user runs it (the ``kubectl-vgpu`` plugin
executable this checkout installs; kubectl itself only finds and executes it), timed from
process start to exit, its peak resident memory read from the kernel's account of that one child
(``wait4``), and its API requests counted by the API server (``api_counts``).

What a paged reading costs is known in advance: one LIST per 500 items (``LIST_PAGE_SIZE``) of
each list it reads, so ``expected_lists`` says how many LISTs of claims, pods and slices a run
should make; a list read unpaged would make one.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.scaling.api_counts import Requests, counted
from e2e.cluster import KubeClient
from vgpu_bridge.kube import LIST_PAGE_SIZE
from vgpu_bridge.status.command import SLICE_NODES_MAX

PLUGIN = "kubectl-vgpu"


@dataclass(frozen=True)
class ViewerRun:
    wall_s: float
    peak_rss_mb: float
    shares_shown: int  # table rows of claims named with the fleet's claim prefix
    requests: Requests


@dataclass(frozen=True)
class ListCounts:
    """LIST requests (pages) of claims, pods and slices."""

    claims: int
    pods: int
    slices: int

    def __str__(self) -> str:
        return f"{self.claims}/{self.pods}/{self.slices}"


def plugin_command() -> list[str]:
    """The plugin beside this Python (the venv's console script), else the same code by module."""
    plugin = Path(sys.executable).with_name(PLUGIN)
    if plugin.is_file():
        return [str(plugin)]
    return [sys.executable, "-m", "vgpu_bridge.cli"]


def run_viewer(
    kube: KubeClient, kubeconfig: Path, scope: list[str], *, claim_prefix: str
) -> ViewerRun:
    """`kubectl vgpu status <scope>` once (table output, to a file); raises if it fails."""
    command = [*plugin_command(), "status", *scope, "--kubeconfig", str(kubeconfig)]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:

        def run() -> tuple[float, float]:
            started = time.monotonic()
            process = subprocess.Popen(command, stdout=out, stderr=err, env=env)
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            if process.returncode != 0:
                err.seek(0)
                raise RuntimeError(f"{' '.join(command)}: exit {process.returncode}: "
                                   f"{err.read().decode(errors='replace')[-2000:]}")  # fmt: skip
            return time.monotonic() - started, usage.ru_maxrss / 1024  # KiB on Linux

        (wall_s, peak_mb), requests = counted(kube, run)
        out.seek(0)
        shown = sum(1 for line in out if claim_prefix.encode() in line)
    return ViewerRun(wall_s, peak_mb, shown, requests)


def measured_lists(requests: Requests) -> ListCounts:
    return ListCounts(requests.lists("resourceclaims"), requests.lists("pods"),
                      requests.lists("resourceslices"))  # fmt: skip


def pages(items: int) -> int:
    """LIST requests a paged reading of `items` items makes (one for none)."""
    return max(1, math.ceil(items / LIST_PAGE_SIZE))


def expected_lists(*, claims: int, pods: int, slices: int, namespaced: bool,
                   namespace_claims: int = 0, namespace_pods: int = 0,
                   namespace_nodes: int = 0, every_claim: bool = True) -> ListCounts:  # fmt: skip
    """What `status -A` (or `-n`: the namespace's claims and pods, the slices of the
    `namespace_nodes` its shares are on (one list each, up to SLICE_NODES_MAX, else all of
    them), then, without the webhook's /bookings (`every_claim`), every claim again for the
    cards' bookings) reads, page by page: claims, pods (and the agents' pods of the release
    namespace: one page here, where no agent runs) and slices."""
    if namespaced:
        claim_pages = pages(namespace_claims) + (pages(claims) if every_claim else 0)
        by_node = namespace_nodes <= SLICE_NODES_MAX
        return ListCounts(claim_pages, pages(namespace_pods) + 1,
                          namespace_nodes if by_node else pages(slices))  # fmt: skip
    return ListCounts(pages(claims), pages(pods) + 1, pages(slices))


def start_floor(runs: int) -> tuple[list[float], list[float]]:
    """What any view pays before its first request, in seconds per run: the plugin's start
    (`--version`: the interpreter and our modules), and that plus importing the Kubernetes
    client, which every view loads to connect."""
    commands = (
        [*plugin_command(), "--version"],
        [sys.executable, "-c", "import vgpu_bridge.status.command, kubernetes.client"],
    )
    timings: tuple[list[float], list[float]] = ([], [])
    for _ in range(runs):
        for command, times in zip(commands, timings, strict=True):
            started = time.monotonic()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            times.append(time.monotonic() - started)
    return timings
