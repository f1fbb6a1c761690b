"""``python -m e2e.cluster up|down|status``.

``up`` prints ``export KUBECONFIG=<path>`` as its last line, so ``eval "$(python -m e2e.cluster up
| tail -1)"`` points kubectl at the cluster. ``down`` leaves no process, port or directory behind.
"""

from __future__ import annotations

import sys

from e2e.cluster.launcher import down, status, up
from e2e.cluster.settings import Settings, SettingsError

USAGE = "usage: python -m e2e.cluster up|down|status"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in {"up", "down", "status"}:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        print(error, file=sys.stderr)
        return 2
    command = argv[0]
    if command == "up":
        cluster = up(settings)
        print(f"cluster {cluster.version} up at {cluster.server} (state {cluster.state_dir})")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        return 0
    if command == "down":
        stopped = down(settings)
        print("cluster stopped" if stopped else "no cluster was running")
        return 0
    running = status(settings)
    if running is None:
        print("no cluster running")
        return 1
    print(f"cluster {running.version} running at {running.server}")
    for component in running.components:
        print(f"  {component.name:<24} pid {component.pid:<8} log {component.log}")
    print(f"export KUBECONFIG={running.kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
