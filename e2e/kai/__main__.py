"""``python -m e2e.kai build --source DIR [--version V]``: build or reuse KAI's scheduler and
binder from the KAI source tree at DIR (e2e/kai/build.py); ``make e2e-kai KAI_SOURCE=DIR`` runs
it before the tests. Prints one line: built or reused, from where, with or without PR #2102.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from e2e.cluster.build import BuildError
from e2e.kai.build import KaiSource, ensure_build, report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.kai")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build KAI's scheduler and binder from a tree")
    build.add_argument("--source", type=Path, required=True, help="a KAI source tree")
    build.add_argument(
        "--version", help="what the tree is (default: git describe, else its digest)"
    )
    args = parser.parse_args(argv)
    try:
        source = KaiSource.read(args.source, version=args.version)
        record = ensure_build(source)
    except BuildError as error:
        print(f"kai-bin: {error}", file=sys.stderr)
        return 1
    print(report(record))
    if not source.has_pr2102:
        print(
            "kai-bin: this tree lacks KAI PR #2102 (its allocator runs with every DRA feature "
            "off): it places none of our shares (docs/kai.md)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
