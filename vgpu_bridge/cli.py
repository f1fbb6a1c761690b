"""`vgpu-bridge <command>`: the entry point of every binary we ship.

Only the chosen command's flags are built (and its modules imported): a restarted webhook
replica does not wait for the translator's YAML reader or the node agent's settings.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Sequence

from vgpu_bridge.version import VersionAction

COMMANDS = {
    "translate": "translate manifests' GPU requests into DRA claim templates",
    "webhook": "serve the mutating admission webhook (HTTPS)",
    "node": "serve the node agent (DRA kubelet plugin)",
    "status": "which pods share which GPU, what each booked and uses (also `kubectl vgpu status`)",
    "uninstall-notice": "before an uninstall: wait for GPU pods being deleted, tell running ones",
}
#: the pip extra a role command needs beyond a bare install (pyproject.toml), and the modules
#: that extra brings which the command imports (tests/unit/test_packaging.py keeps them in step)
EXTRAS = {
    "webhook": ("webhook", ("structlog", "cryptography")),
    "node": ("node", ("structlog", "grpc", "google.protobuf", "pynvml")),
}


def missing_extra(command: str | None) -> str | None:
    """What to say when `command` is a role command whose extra this install lacks."""
    if command not in EXTRAS:
        return None
    extra, modules = EXTRAS[command]
    missing = [module for module in modules if not _importable(module)]
    if not missing:
        return None
    return (
        f"vgpu-bridge {command} needs the [{extra}] extra (no module {', '.join(missing)}):"
        f" pip install 'vgpu-bridge[{extra}]'"
    )


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Load what lives as long as the process (modules, classes, settings) with the cyclic
    collector off, then freeze it. At a webhook start its ~40 passes over the growing heap found
    nothing to free and took ~15% of the start; frozen, later passes skip those objects too."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """Every command's flags, or only those of `chosen` (the others are listed, and refused
    by name if asked for without flags being built: `main` never does that)."""
    parser = argparse.ArgumentParser(
        prog="vgpu-bridge", description="HAMi-style GPU sharing on Kubernetes DRA"
    )
    parser.add_argument("--version", action=VersionAction)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, help_text in COMMANDS.items():
        if chosen is None and missing_extra(name):
            commands.add_parser(name, help=f"{help_text} (needs the [{EXTRAS[name][0]}] extra)")
            continue
        command = commands.add_parser(name, help=help_text)
        if chosen is None or name == chosen:
            _ADD_ARGUMENTS[name](command)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command `argv` names (its first word that is no flag), if it is one of ours."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in COMMANDS else None


def _add_translate_arguments(parser: argparse.ArgumentParser) -> None:
    from vgpu_bridge import translate_command

    translate_command.add_arguments(parser)
    parser.set_defaults(run=translate_command.main)


def _add_webhook_arguments(parser: argparse.ArgumentParser) -> None:
    from vgpu_bridge.webhook.settings import Settings

    Settings.add_arguments(parser)
    parser.set_defaults(run=_run_webhook)


def _run_webhook(args: argparse.Namespace) -> int:
    with long_lived():
        from vgpu_bridge.webhook.app import main  # the I/O shell loads only when asked for

    return main(args, os.environ)


def _add_node_arguments(parser: argparse.ArgumentParser) -> None:
    from vgpu_bridge.node.settings import InstallSettings, Settings

    Settings.add_arguments(parser)
    parser.set_defaults(run=_run_node)
    steps = parser.add_subparsers(dest="node_command", title="other node commands")
    install = steps.add_parser(
        "install-libvgpu",
        help="install libvgpu.so and the ld.so.preload CDI mounts into the host's vgpu dir",
    )
    InstallSettings.add_arguments(install)
    install.set_defaults(run=_run_install_libvgpu)


def _run_node(args: argparse.Namespace) -> int:
    with long_lived():
        from vgpu_bridge.node.app import main  # the I/O shell loads only when asked for

    return main(args, os.environ)


def _run_install_libvgpu(args: argparse.Namespace) -> int:
    from vgpu_bridge.node.library import main

    return main(args, os.environ)


def _add_status_arguments(parser: argparse.ArgumentParser) -> None:
    from vgpu_bridge.status.command import add_arguments

    add_arguments(parser)
    parser.set_defaults(run=_run_status)


def _run_status(args: argparse.Namespace) -> int:
    from vgpu_bridge.status.command import main

    return main(args, os.environ)


def _add_uninstall_notice_arguments(parser: argparse.ArgumentParser) -> None:
    from vgpu_bridge import uninstall_notice

    uninstall_notice.add_arguments(parser)
    parser.set_defaults(run=_run_uninstall_notice)


def _run_uninstall_notice(args: argparse.Namespace) -> int:
    from vgpu_bridge.uninstall_notice import main

    return main(args, os.environ)


_ADD_ARGUMENTS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "translate": _add_translate_arguments,
    "webhook": _add_webhook_arguments,
    "node": _add_node_arguments,
    "status": _add_status_arguments,
    "uninstall-notice": _add_uninstall_notice_arguments,
}


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    chosen = chosen_command(words)
    missing = missing_extra(chosen)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    with long_lived():
        args = build_parser(chosen).parse_args(words)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
