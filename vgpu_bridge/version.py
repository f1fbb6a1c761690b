"""The version every binary reports (`vgpu-bridge --version`, `kubectl vgpu --version`), read
only when asked: a webhook replica's start pays nothing for the metadata lookup."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from vgpu_bridge import __version__

DISTRIBUTION = "vgpu-bridge"


def package_version() -> str:
    """The installed distribution's version (its metadata, also inside the kubectl plugin's
    zipapp); the source tree's when no metadata is found."""
    import importlib.metadata

    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return __version__


class VersionAction(argparse.Action):
    """`--version`: prints `<prog> <version>` on stdout and exits 0."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version"
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print(f"{parser.prog} {package_version()}", file=sys.stdout)
        parser.exit()
