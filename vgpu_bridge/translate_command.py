"""`vgpu-bridge translate`: the migration tool for manifests (DESIGN §4)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from vgpu_bridge.adapters import AdapterRegistry, default_registry
from vgpu_bridge.core import (
    PROFILES,
    InvalidRequest,
    Inventory,
    TranslationContext,
    TranslatorConfig,
    profile_named,
)
from vgpu_bridge.core.config import RESOURCE_NAME_FIELDS, hami_setting
from vgpu_bridge.manifests import ManifestError, dump_objects, load_objects

EXIT_INVALID = 1
EXIT_USAGE = 2


#: HAMi's configurable resource names: (TranslatorConfig field, default)
_RESOURCE_NAME_FLAGS = tuple((name, hami_setting(name)[1]) for name in RESOURCE_NAME_FIELDS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    registry = default_registry()  # for the adapter names only
    parser.add_argument("-f", "--filename", required=True, help="manifest file, or - for stdin")
    parser.add_argument("--scheduler", default="auto", choices=["auto", *registry.names()])
    parser.add_argument("--profile", default="default", choices=sorted(PROFILES))
    parser.add_argument("--inventory", help="ResourceSlices (YAML/JSON) that tell card sizes")
    parser.add_argument("-o", "--output", default="yaml", choices=["yaml", "json"])
    parser.add_argument("--default-memory", type=int, default=0, help="MiB; 0 = whole card")
    parser.add_argument("--default-cores", type=int, default=0, help="percent of SMs; 0 = none")
    parser.add_argument("--default-gpu-num", type=int, default=1)
    parser.add_argument("--memory-factor", type=int, default=1, help="gpumem unit in MiB")
    for field, default in _RESOURCE_NAME_FLAGS:
        flag = "--" + field.replace("_", "-")
        parser.add_argument(flag, default=default, help=f"HAMi's name (default {default})")
    parser.add_argument(
        "--allow-privileged",
        action="store_true",
        help="admit GPU pods with a privileged container (refused by default, as HAMi >= 2.10)",
    )
    parser.add_argument("--volcano-version", help="Volcano release in the cluster, e.g. v1.15.1")
    parser.add_argument("--kai-version", help="KAI Scheduler build in the cluster, e.g. v0.18.0")


def _read(name: str, stdin: TextIO) -> str:
    if name == "-":
        return stdin.read()
    return Path(name).read_text(encoding="utf-8")


def _source(name: str) -> str:
    return "<stdin>" if name == "-" else name


def _context(args: argparse.Namespace, stdin: TextIO) -> TranslationContext:
    profile = profile_named(args.profile)
    config = TranslatorConfig(
        default_memory=args.default_memory,
        default_cores=args.default_cores,
        default_gpu_num=args.default_gpu_num,
        memory_factor=args.memory_factor,
        allow_privileged=args.allow_privileged,
        **{field: getattr(args, field) for field, _ in _RESOURCE_NAME_FLAGS},
    )
    inventory = Inventory()
    if args.inventory:
        slices = load_objects(_read(args.inventory, stdin), source=_source(args.inventory))
        inventory = Inventory.from_slices(
            (s for s in slices if s.get("kind") == "ResourceSlice"),
            memory_capacity=profile.memory_capacity,
        )
    return TranslationContext(config=config, profile=profile, inventory=inventory)


def translate_objects(
    objects: list[dict[str, Any]],
    *,
    context: TranslationContext,
    registry: AdapterRegistry,
    scheduler: str,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each object (translated), then each template it needs; and the warnings.

    Raises `ManifestError` carrying every refusal when any object is refused.
    """
    out: list[dict[str, Any]] = []
    warnings: list[str] = []
    refusals: list[str] = []
    emitted: set[tuple[str | None, str]] = set()
    for obj in objects:
        try:
            plan = registry.pick(obj, scheduler).translate(obj, context=context)
        except InvalidRequest as exc:
            refusals += exc.lines()
            continue
        out.append(plan.apply_to(obj))
        warnings += [f"{plan.object_ref}: {w}" for w in plan.warnings]
        for template in plan.templates:
            key = (template["metadata"].get("namespace"), template["metadata"]["name"])
            if key not in emitted:
                emitted.add(key)
                out.append(template)
    if refusals:
        raise ManifestError(refusals)
    return out, warnings


def run(args: argparse.Namespace, *, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    try:
        context = _context(args, stdin)
        objects = load_objects(_read(args.filename, stdin), source=_source(args.filename))
        registry = default_registry(
            volcano_version=args.volcano_version, kai_version=args.kai_version
        )
        out, warnings = translate_objects(
            objects, context=context, registry=registry, scheduler=args.scheduler
        )
    except OSError as exc:
        print(f"vgpu-bridge translate: cannot read {exc.filename}: {exc.strerror}", file=stderr)
        return EXIT_USAGE
    except ValueError as exc:  # TranslatorConfig's and our ManifestError
        lines = exc.lines if isinstance(exc, ManifestError) else [f"settings: {exc}"]
        print("\n".join(lines), file=stderr)
        return EXIT_INVALID
    except InvalidRequest as exc:
        print("\n".join(exc.lines()), file=stderr)
        return EXIT_INVALID
    for warning in warnings:
        print(f"warning: {warning}", file=stderr)
    stdout.write(dump_objects(out, output=args.output))
    return 0


def main(args: argparse.Namespace) -> int:
    return run(args, stdin=sys.stdin, stdout=sys.stdout, stderr=sys.stderr)
