"""`vgpu-bridge <command>`: the entry point of every binary we ship."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from vgpu_bridge import __version__, translate_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vgpu-bridge", description="HAMi-style GPU sharing on Kubernetes DRA"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    translate = commands.add_parser(
        "translate", help="translate manifests' GPU requests into DRA claim templates"
    )
    translate_command.add_arguments(translate)
    translate.set_defaults(run=translate_command.main)
    webhook = commands.add_parser("webhook", help="serve the mutating admission webhook (HTTPS)")
    _add_webhook_arguments(webhook)
    webhook.set_defaults(run=_run_webhook)
    node = commands.add_parser("node", help="serve the node agent (DRA kubelet plugin)")
    _add_node_arguments(node)
    node.set_defaults(run=_run_node)
    return parser


def _add_webhook_arguments(parser: argparse.ArgumentParser) -> None:
    from vgpu_bridge.webhook.settings import Settings

    Settings.add_arguments(parser)


def _run_webhook(args: argparse.Namespace) -> int:
    from vgpu_bridge.webhook.app import main  # the I/O shell loads only when asked for

    return main(args, os.environ)


def _add_node_arguments(parser: argparse.ArgumentParser) -> None:
    from vgpu_bridge.node.settings import InstallSettings, Settings

    Settings.add_arguments(parser)
    steps = parser.add_subparsers(dest="node_command", title="other node commands")
    install = steps.add_parser(
        "install-libvgpu",
        help="install libvgpu.so and the ld.so.preload CDI mounts into the host's vgpu dir",
    )
    InstallSettings.add_arguments(install)
    install.set_defaults(run=_run_install_libvgpu)


def _run_node(args: argparse.Namespace) -> int:
    from vgpu_bridge.node.app import main  # the I/O shell loads only when asked for

    return main(args, os.environ)


def _run_install_libvgpu(args: argparse.Namespace) -> int:
    from vgpu_bridge.node.library import main

    return main(args, os.environ)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
