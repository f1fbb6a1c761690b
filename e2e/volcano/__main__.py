"""``python -m e2e.volcano build``: build or reuse the Volcano binary (``make scheduler-bin``).

Prints one line: built or reused, where, its size and how long the build took.
"""

from __future__ import annotations

import sys

from e2e.cluster.build import BuildError
from e2e.volcano.build import VolcanoBuild, ensure_binary, report

USAGE = "usage: python -m e2e.volcano build"


def main(argv: list[str]) -> int:
    if argv != ["build"]:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        print(report(ensure_binary(VolcanoBuild.from_env())))
    except BuildError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
