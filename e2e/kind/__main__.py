"""``python -m e2e.kind build|up|down``: the kind tier of ``make e2e-kind``.

``build`` builds or reuses the tier's Go programs. ``up`` starts the tier's own dockerd, builds
or reuses the node image, creates the cluster, builds and loads the chart's images and installs
the chart (last line: ``export KUBECONFIG=...``). ``down`` deletes the cluster, stops dockerd and
puts the host back as it was; it also cleans up after a crashed run. Run either under
``flock /tmp/vgpu-node-tier.lock`` so the kind and real-node tiers never overlap.
"""

from __future__ import annotations

import sys

from e2e.cluster.settings import Settings
from e2e.kind import build
from e2e.kind.cluster import Kind, KindUnavailable, down, up
from e2e.kind.steps import StepError

USAGE = "usage: python -m e2e.kind build|up|down"


def main(argv: list[str]) -> int:
    if argv not in (["build"], ["up"], ["down"]):
        print(USAGE, file=sys.stderr)
        return 2
    settings = Settings.from_env()
    if argv == ["build"]:
        print(build.report(build.ensure_tools(settings)))
        return 0
    kind = Kind.from_settings(settings)
    try:
        if argv == ["up"]:
            up(kind)
            print(f"export KUBECONFIG={kind.kubeconfig}")
            return 0
        restored = down(kind)
    except KindUnavailable as error:
        print(f"e2e-kind: {error}; see e2e/kind/README.md", file=sys.stderr)
        return 2
    except StepError as error:
        print(f"e2e-kind: {error}", file=sys.stderr)
        return 1
    return restored.report()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
