"""``python -m e2e.cluster up|down|status|build|gomod [VERSION]``.

``up`` builds or reuses the binary, starts the shared cluster and prints
``export KUBECONFIG=<path>`` as its last line, so ``eval "$(python -m e2e.cluster up | tail -1)"``
points kubectl at it. ``down`` leaves no process, port or directory behind. ``status`` exits 1
when no healthy cluster runs. ``build`` is ``make cluster-bin``. ``gomod [VERSION]`` regenerates
``gotools/go.mod`` and ``go.sum`` for a release (commit the result).
"""

from __future__ import annotations

import sys

from e2e.cluster.build import ensure_binary, report
from e2e.cluster.gomod import write_gomod
from e2e.cluster.launcher import down, status, up
from e2e.cluster.settings import GOTOOLS_DIR, Settings, SettingsError

USAGE = "usage: python -m e2e.cluster up|down|status|build|gomod [VERSION]"


def main(argv: list[str]) -> int:
    commands = {"up": _up, "down": _down, "status": _status, "build": _build, "gomod": _gomod}
    if not argv or argv[0] not in commands or (len(argv) > 1 and argv[0] != "gomod"):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        print(error, file=sys.stderr)
        return 2
    return commands[argv[0]](settings, argv[1:])


def _up(settings: Settings, _: list[str]) -> int:
    cluster = up(settings)
    print(f"cluster {cluster.version} up at {cluster.server} (state {cluster.state_dir})")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0


def _down(settings: Settings, _: list[str]) -> int:
    print("cluster stopped" if down(settings) else "no cluster was running")
    return 0


def _status(settings: Settings, _: list[str]) -> int:
    running = status(settings)
    if running is None:
        print("no cluster running")
        return 1
    print(f"cluster {running.version} running at {running.server}")
    for component in running.components:
        print(f"  {component.name:<24} pid {component.pid:<8} log {component.log}")
    print(f"export KUBECONFIG={running.kubeconfig}")
    return 0


def _build(settings: Settings, _: list[str]) -> int:
    print(report(ensure_binary(settings)))
    return 0


def _gomod(settings: Settings, args: list[str]) -> int:
    version = args[0] if args else settings.k8s_version
    write_gomod(GOTOOLS_DIR, version, go_env=settings.go_env)
    print(f"wrote {GOTOOLS_DIR / 'go.mod'} for k8s.io/kubernetes {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
