"""Run `vgpu-bridge` in-process, as a user would from a shell, and capture what it prints."""

from __future__ import annotations

import io
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from vgpu_bridge.cli import main

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class CliResult:
    code: int
    stdout: str
    stderr: str


def run_cli(args: str | list[str], *, stdin: str = "") -> CliResult:
    """`vgpu-bridge <args>`; `{data}` in a string of args names tests/data."""
    argv = shlex.split(args.replace("{data}", str(DATA))) if isinstance(args, str) else args
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", io.StringIO(stdin))
        patch.setattr("sys.stdout", out)
        patch.setattr("sys.stderr", err)
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
    return CliResult(code, out.getvalue(), err.getvalue())
