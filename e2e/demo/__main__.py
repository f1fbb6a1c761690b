"""``python -m e2e.demo [--keep]``: run the demo; ``--keep`` leaves the local cluster running."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from e2e.cluster import Settings, down, status, up
from e2e.demo.demo import NAMESPACE, demo_stack, run_examples
from e2e.demo.table import render

NOTES = """\
What ran: kube-apiserver, kube-scheduler and kube-controller-manager (built from upstream; Volcano's
vc-scheduler too, when logged above), `vgpu-bridge webhook`, and one `vgpu-bridge node` per fake
node with mock GPUs. No kubelet and no container runtime run here: a kubelet stand-in calls each
agent's DRA socket as the kubelet would, so "limits" are read from the CDI spec the agent wrote,
which a runtime would inject (with libvgpu.so preloaded through the mounted /etc/ld.so.preload)."""


STATUS_TITLE = f"$ kubectl vgpu status -n {NAMESPACE}   (the shares as users see them)"


def status_view(kubeconfig: Path) -> str:
    """What `kubectl vgpu status -n vgpu-demo` prints (the same command as `vgpu-bridge status`),
    or why it printed nothing."""
    done = subprocess.run(
        [sys.executable, "-m", "vgpu_bridge.cli", "status", "-n", NAMESPACE],
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.stdout if done.returncode == 0 else f"(status failed: {done.stderr.strip()})\n"


def main(argv: list[str], out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__)
    parser.add_argument("--keep", action="store_true", help="leave the local cluster running")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    started = time.monotonic()

    def log(line: str) -> None:
        print(f"demo [{time.monotonic() - started:5.1f}s] {line}", file=out, flush=True)

    already_up = status(settings) is not None
    cluster = up(settings)
    log(f"cluster {cluster.version} at {cluster.server} ({'reused' if already_up else 'started'})")
    try:
        with demo_stack(cluster.client(), cluster.kubeconfig, settings, log) as stack:
            rows = run_examples(stack, settings, out)
            print(f"\nnamespace {NAMESPACE}:\n{render(rows)}\n\n{NOTES}\n", file=out, flush=True)
            print(f"{STATUS_TITLE}\n{status_view(cluster.kubeconfig)}", file=out, flush=True)
            log("removing the demo's namespace, nodes, agents and webhook")
    finally:
        if args.keep or already_up:
            why = "--keep" if args.keep else "it was running before the demo"
            print(f"cluster kept ({why}): export KUBECONFIG={cluster.kubeconfig}", file=out)
            print("stop it with: python -m e2e.cluster down", file=out)
        else:
            down(settings)
            log("cluster stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
