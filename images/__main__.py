"""``python -m images [--arch amd64|arm64]... [--out DIR]``: what ``make images`` runs.

Builds the webhook and agent images for each architecture (default: both) in the kind tier's
private dockerd (started here when it is not running, and then stopped again with the host put
back as it was), checks each (``images.check``), saves each as a ``docker save`` archive
``DIR/vgpu-bridge-<part>-<version>-<arch>.tar`` (default ``dist/images``; ``docker load -i``
reads it) and prints a table of their sizes against the budgets. Needs root (dockerd).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from e2e.cluster.settings import REPO_ROOT, Settings
from e2e.kind import dockerd, host
from e2e.kind.steps import StepError, run
from images.build import ARCHES, PARTS, Labels, build_images, image_tag
from images.check import Row, check_config, check_runs, sizes_by_group, table

#: the kind tier's dockerd data root (e2e.kind.cluster.Kind.data_root): bases stay warm there
DATA_ROOT = "kind-docker"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m images",
        description="Build, check and save the webhook and agent images (what `make images` runs).",
    )
    parser.add_argument(
        "--arch", action="append", choices=sorted(ARCHES), help="repeatable; default: all"
    )
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "dist" / "images", help="default: dist/images"
    )
    return parser.parse_args(list(argv))


@contextmanager
def private_dockerd(settings: Settings) -> Iterator[None]:
    """The kind tier's dockerd: reused when running, else started and, after, stopped with the
    host put back as recorded (as ``python -m e2e.kind down`` does)."""
    if dockerd.running_pid() is not None:
        yield
        return
    if os.geteuid() != 0:
        raise StepError("make images runs the kind tier's private dockerd and needs root")
    dockerd.ensure_packages()
    data_root = settings.cache_root / DATA_ROOT
    state_file = settings.cache_root / "state" / "images" / "host.json"
    host.start_dockerd(data_root, state_file)
    try:
        yield
    finally:
        restored = host.stop_dockerd(data_root, state_file)
        for line in restored.changes:
            print(f"restored: {line}")
        if restored.failures:
            raise StepError("host not restored: " + "; ".join(restored.failures))


def main(argv: Sequence[str]) -> int:
    args = parse(argv)
    settings = Settings.from_env()
    arches = [ARCHES[name] for name in (args.arch or sorted(ARCHES))]
    labels = Labels.of_checkout()
    started = time.monotonic()
    rows: list[Row] = []
    try:
        with private_dockerd(settings):
            args.out.mkdir(parents=True, exist_ok=True)
            for arch in arches:
                tags = {part: image_tag(part, arch, labels.version) for part in PARTS}
                build_images(settings, arch, tags, labels)
                for part, tag in tags.items():
                    check_config(part, arch, tag, labels.oci())
                    print(f"{tag}: {check_runs(part, arch, tag)}", flush=True)
                    archive = args.out / f"{tag.replace(':', '-')}.tar"
                    run(["docker", "save", "-o", str(archive), tag], env=dockerd.docker_env())
                    size = int(
                        run(["docker", "image", "inspect", "-f", "{{.Size}}", tag],
                            env=dockerd.docker_env(), quiet=True)
                    )  # fmt: skip
                    rows.append(Row(part, arch.name, size, sizes_by_group(archive)))
    except StepError as error:
        print(f"make images: {error}", file=sys.stderr)
        return 1
    print(table(rows))
    print(f"archives in {args.out}; {time.monotonic() - started:.0f} s")
    over = [f"{row.part}/{row.arch}" for row in rows if row.over_budget]
    if over:
        print(f"make images: over budget: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
