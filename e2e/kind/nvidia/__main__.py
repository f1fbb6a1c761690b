"""``python -m e2e.kind.nvidia build|up|down``: the tier of ``make e2e-nvidia``.

``build`` and ``up`` take ``--nvidia-source DIR`` (a checkout of
kubernetes-sigs/dra-driver-nvidia-gpu) and ``--nvml-mock-source DIR`` (a checkout of
NVIDIA/k8s-test-infra), or ``NVIDIA_DRA_SOURCE`` and ``NVML_MOCK_SOURCE``. ``up`` prints
``export KUBECONFIG=...`` last; NVIDIA's plugin and the chart run with ``--consumable-shares``
= ``NVIDIA_CONSUMABLE_SHARES`` (default 100; the scenarios read it too). ``down`` deletes the
cluster, stops the tier's dockerd, removes the mock driver root and puts the host back (also
after a crash). Run ``up``/``down`` under
``flock /tmp/vgpu-node-tier.lock``, as the kind tier.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from e2e.cluster.build import BuildError
from e2e.cluster.settings import Settings
from e2e.kind.cluster import Kind, KindUnavailable
from e2e.kind.nvidia import modes, tier
from e2e.kind.nvidia.build import ensure_build
from e2e.kind.steps import StepError


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m e2e.kind.nvidia")
    parser.add_argument("command", choices=("build", "up", "down"))
    parser.add_argument(
        "--nvidia-source", type=Path, default=os.environ.get("NVIDIA_DRA_SOURCE") or None
    )
    parser.add_argument("--nvml-mock-source", type=Path,
                        default=os.environ.get("NVML_MOCK_SOURCE") or None)  # fmt: skip
    args = parser.parse_args(argv)
    if args.command != "down" and (args.nvidia_source is None or args.nvml_mock_source is None):
        parser.error("build and up need --nvidia-source and --nvml-mock-source "
                     "(or NVIDIA_DRA_SOURCE and NVML_MOCK_SOURCE)")  # fmt: skip
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    settings = Settings.from_env()
    try:
        if args.command == "build":
            built = ensure_build(settings, args.nvidia_source, args.nvml_mock_source)
            for key, value in built.record.items():
                print(f"{key}: {value}")
            return 0
        kind = Kind.from_settings(settings)
        if args.command == "up":
            tier.up(kind, args.nvidia_source, args.nvml_mock_source, modes.mode_from_env())
            print(f"export KUBECONFIG={kind.kubeconfig}")
            return 0
        restored = tier.down(kind)
    except KindUnavailable as error:
        print(f"e2e-nvidia: {error}; see e2e/kind/README.md", file=sys.stderr)
        return 2
    except (StepError, BuildError, ValueError) as error:
        print(f"e2e-nvidia: {error}", file=sys.stderr)
        return 1
    return restored.report()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
