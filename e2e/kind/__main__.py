"""``python -m e2e.kind up|down``: the kind cluster of ``make e2e-kind`` (needs Docker and kind)."""

from __future__ import annotations

import subprocess
import sys

from e2e.cluster.settings import Settings
from e2e.kind.cluster import Kind, KindUnavailable, down, up

USAGE = "usage: python -m e2e.kind up|down"


def main(argv: list[str]) -> int:
    if argv not in (["up"], ["down"]):
        print(USAGE, file=sys.stderr)
        return 2
    kind = Kind.from_settings(Settings.from_env())
    try:
        (up if argv == ["up"] else down)(kind)
    except KindUnavailable as error:
        print(f"e2e-kind: {error}; see e2e/kind/README.md", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as error:
        print(f"e2e-kind: {' '.join(error.cmd)} failed:\n{error.stderr}", file=sys.stderr)
        return 1
    if argv == ["up"]:
        print(f"export KUBECONFIG={kind.kubeconfig}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
