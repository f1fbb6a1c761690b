"""`vgpu-bridge translate`: the migration tool for manifests (DESIGN §4), made for GitOps
repositories: many files and directories at once, each file's comments and layout kept
(`manifest_layout`), and `--in-place` rewrites that change nothing when any object is refused."""

from __future__ import annotations

import argparse
import dataclasses
import json
import stat
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from vgpu_bridge.adapters import AdapterRegistry, default_registry
from vgpu_bridge.atomic_files import write_atomic
from vgpu_bridge.core import (
    ENFORCER_DRIVER,
    NVIDIA,
    PROFILES,
    InvalidRequest,
    Inventory,
    TranslationContext,
    TranslatorConfig,
    nvidia_profile,
    profile_named,
)
from vgpu_bridge.core.config import RESOURCE_NAME_FIELDS, hami_setting
from vgpu_bridge.core.errors import shown
from vgpu_bridge.core.jsonpatch import apply_patch
from vgpu_bridge.core.quantity import QuantityError, parse_quantity
from vgpu_bridge.manifest_files import STDIN, FileProblem, ManifestFile, manifest_files
from vgpu_bridge.manifest_layout import Change, Piece, pieces, rewrite
from vgpu_bridge.manifests import (
    Document,
    ManifestError,
    dump_objects,
    load_documents,
    load_objects,
)

EXIT_INVALID = 1
EXIT_USAGE = 2


#: HAMi's configurable resource names: (TranslatorConfig field, default)
_RESOURCE_NAME_FLAGS = tuple((name, hami_setting(name)[1]) for name in RESOURCE_NAME_FIELDS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    registry = default_registry()  # for the adapter names only
    parser.add_argument(
        "-f", "--filename", action="append", required=True, metavar="FILE|DIR|-",
        help="a manifest file, a directory of them, or - for stdin (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "-R", "--recursive", action="store_true", help="read -f directories and all below them"
    )
    parser.add_argument(
        "--in-place", action="store_true",
        help="rewrite each file that changes (atomically; templates follow their workload)",
    )  # fmt: skip
    parser.add_argument("--scheduler", default="auto", choices=["auto", *registry.names()])
    parser.add_argument("--profile", default="default", choices=sorted(PROFILES))
    parser.add_argument(
        "--nvidia-consumable-shares", type=_consumable_shares, metavar="N|memory|unlimited",
        help="--profile nvidia: the --consumable-shares NVIDIA's DRA driver runs with "
        "(default 100: gpucores are booked as shares of 100)",
    )  # fmt: skip
    parser.add_argument(
        "--enforcer-driver", type=_enforcer_driver, metavar="NAME",
        help=f"--profile nvidia: our enforcer's driver and DeviceClass (default {ENFORCER_DRIVER})",
    )  # fmt: skip
    parser.add_argument("--inventory", help="ResourceSlices (YAML/JSON) that tell card sizes")
    parser.add_argument(
        "--card-memory", action="append", default=[], metavar="SIZE",
        help="a card memory size in the cluster, e.g. 80Gi (repeatable): card sizes for shares "
        "in percent and KAI fractions without --inventory",
    )  # fmt: skip
    parser.add_argument(
        "-o", "--output", default="yaml", choices=["yaml", "json"],
        help="yaml keeps each file's comments and layout; json prints one List",
    )  # fmt: skip
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


def _consumable_shares(value: str) -> str:
    """NVIDIA's --consumable-shares value, checked as the profile reads it."""
    try:
        nvidia_profile(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _enforcer_driver(value: str) -> str:
    try:
        nvidia_profile(enforcer_driver=value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _check_usage(args: argparse.Namespace) -> None:
    if args.profile != NVIDIA.name:
        for flag in ("nvidia_consumable_shares", "enforcer_driver"):
            if getattr(args, flag) is not None:
                option = "--" + flag.replace("_", "-")
                raise FileProblem(f"{option} applies to --profile {NVIDIA.name} only")
    if args.in_place and STDIN in args.filename:
        raise FileProblem("--in-place: standard input (-f -) has no file to rewrite")
    if args.in_place and args.output == "json":
        raise FileProblem("--in-place keeps each file's own format: leave out -o json")
    if args.inventory == STDIN and STDIN in args.filename:
        raise FileProblem("--inventory -: standard input is already read by -f -")


def _card_sizes(values: list[str]) -> frozenset[int]:
    sizes = set()
    for value in values:
        try:
            size = parse_quantity(value)
        except QuantityError as exc:
            raise ValueError(f"--card-memory: {exc}") from None
        if size <= 0 or size != size.to_integral_value():
            raise ValueError(f"--card-memory: must be a positive byte count, got {shown(value)}")
        sizes.add(int(size))
    return frozenset(sizes)


def _context(args: argparse.Namespace, stdin: TextIO) -> TranslationContext:
    profile = profile_named(
        args.profile,
        nvidia_consumable_shares=args.nvidia_consumable_shares or "100",
        enforcer_driver=args.enforcer_driver or ENFORCER_DRIVER,
    )
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
        (found,) = manifest_files([args.inventory], recursive=False, stdin=stdin)
        inventory = Inventory.from_slices(
            (
                s
                for s in load_objects(found.text, source=found.name)
                if s.get("kind") == "ResourceSlice"
            ),
            memory_capacity=profile.memory_capacity,
        )
    if args.card_memory:
        inventory = inventory.with_sizes(profile.driver, _card_sizes(args.card_memory))
    return TranslationContext(config=config, profile=profile, inventory=inventory)


@dataclass
class _Piece:
    """One piece of one file (`manifest_layout.pieces`), its documents, and what translation
    does to it: the changes to its objects and the templates to write after it."""

    piece: Piece
    documents: list[Document]
    changes: list[Change] = dataclasses.field(default_factory=list)
    templates: list[dict[str, Any]] = dataclasses.field(default_factory=list)


@dataclass
class _File:
    manifest: ManifestFile
    pieces: list[_Piece]

    @property
    def changed(self) -> bool:
        return any(p.changes or p.templates for p in self.pieces)

    def objects(self) -> list[dict[str, Any]]:
        return [o for p in self.pieces for d in p.documents for o in d.objects]


def _read(manifests: list[ManifestFile]) -> list[_File]:
    """Every file cut into pieces and read; `ManifestError` with the problems of all of them."""
    files, problems = [], []
    for manifest in manifests:
        found, seen = [], 0
        for piece in pieces(manifest.text):
            try:
                documents = load_documents(
                    piece.body, source=manifest.name, first_line=piece.first_line,
                    first_document=seen + 1,
                )  # fmt: skip
            except ManifestError as exc:
                problems += exc.lines
                seen += 1  # a piece holds one document, unless the file could not be cut
                continue
            seen += len(documents)
            found.append(_Piece(piece, documents))
        files.append(_File(manifest, found))
    if problems:
        raise ManifestError(problems)
    return files


def _template_key(obj: dict[str, Any]) -> tuple[object, object] | None:
    if obj.get("kind") != "ResourceClaimTemplate" or not isinstance(obj.get("metadata"), dict):
        return None
    return obj["metadata"].get("namespace"), obj["metadata"].get("name")


@dataclass
class _Translation:
    """What translating every file gives: `objects` (each translated object, then the templates
    it needs) for -o json, the files' pieces with their changes, and the warnings."""

    files: list[_File]
    objects: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)


def _translate(
    files: list[_File], *, context: TranslationContext, registry: AdapterRegistry, scheduler: str
) -> _Translation:
    """Raises `ManifestError` carrying every refusal when any object is refused. A template is
    written once, after the first object that needs it, and not at all when one of the files
    already holds it."""
    result = _Translation(files)
    refusals: list[str] = []
    emitted = {key for f in files for o in f.objects() if (key := _template_key(o)) is not None}
    for piece in (p for f in files for p in f.pieces):
        for number, document in enumerate(piece.documents):
            for index, obj in enumerate(document.objects):
                try:
                    plan = registry.pick(obj, scheduler).translate(obj, context=context)
                except InvalidRequest as exc:
                    refusals += exc.lines()
                    continue
                result.objects.append(plan.apply_to(obj))
                result.warnings += [f"{plan.object_ref}: {w}" for w in plan.warnings]
                if plan.patch:
                    item = index if document.is_list else None
                    piece.changes.append(Change(number, item, plan.patch))
                for template in plan.templates:
                    key = _template_key(template)
                    if key is not None and key not in emitted:
                        emitted.add(key)
                        piece.templates.append(template)
                        result.objects.append(template)
    if refusals:
        raise ManifestError(refusals)
    return result


def _file_text(translated: _File) -> str:
    """The file as translation leaves it: YAML in its own layout, or JSON for a `.json` file (a
    `List` when it now holds more than one object)."""
    name = translated.manifest.name
    if translated.manifest.is_json and translated.changed:
        objects = _json_objects(translated)
        one = (
            objects[0]
            if len(objects) == 1
            else {"apiVersion": "v1", "kind": "List", "items": objects}
        )
        return json.dumps(one, indent=2) + "\n"
    return "".join(rewrite(p.piece, p.changes, p.templates, source=name) for p in translated.pieces)


def _json_objects(translated: _File) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for piece in translated.pieces:
        by_place = {(c.document, c.item): c.patch for c in piece.changes}
        for number, document in enumerate(piece.documents):
            for index, obj in enumerate(document.objects):
                patch = by_place.get((number, index if document.is_list else None))
                out.append(apply_patch(obj, patch) if patch else obj)
        out += piece.templates
    return out


def _joined(texts: list[str]) -> str:
    """Files' texts as one YAML stream: a document start between two files."""
    out = ""
    for text in texts:
        if out and not out.endswith("\n"):
            out += "\n"
        if out and not text.startswith("---"):
            out += "---\n"
        out += text
    return out


def _write_in_place(files: list[_File], stderr: TextIO) -> None:
    """Every changed file rewritten; none when one of them is a link (which a rewrite would
    turn into a copy) or cannot be written."""
    changed = [f for f in files if f.changed]
    for translated in changed:
        assert translated.manifest.path is not None
        if translated.manifest.path.is_symlink():
            raise FileProblem(f"{translated.manifest.name}: --in-place would replace a symlink")
    texts = [_file_text(f) for f in changed]
    for translated, text in zip(changed, texts, strict=True):
        path = translated.manifest.path
        assert path is not None
        try:
            write_atomic(path, text.encode(), mode=stat.S_IMODE(path.stat().st_mode))
        except OSError as exc:
            raise FileProblem(f"{path}: cannot write: {exc.strerror}") from None
        print(f"{path}: translated", file=stderr)
    print(f"vgpu-bridge translate: {len(changed)} of {len(files)} files changed", file=stderr)


def run(args: argparse.Namespace, *, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    try:
        _check_usage(args)
        context = _context(args, stdin)
        files = _read(list(manifest_files(args.filename, recursive=args.recursive, stdin=stdin)))
        registry = default_registry(
            volcano_version=args.volcano_version, kai_version=args.kai_version
        )
        translation = _translate(
            files, context=context, registry=registry, scheduler=args.scheduler
        )
        for warning in translation.warnings:
            print(f"warning: {warning}", file=stderr)
        if args.in_place:
            _write_in_place(files, stderr)
        elif args.output == "json":
            stdout.write(dump_objects(translation.objects, output="json"))
        else:
            stdout.write(_joined([_file_text(f) for f in files]))
    except FileProblem as exc:
        print(f"vgpu-bridge translate: {exc}", file=stderr)
        return EXIT_USAGE
    except ValueError as exc:  # TranslatorConfig's and our ManifestError
        lines = exc.lines if isinstance(exc, ManifestError) else [f"settings: {exc}"]
        print("\n".join(lines), file=stderr)
        return EXIT_INVALID
    except InvalidRequest as exc:
        print("\n".join(exc.lines()), file=stderr)
        return EXIT_INVALID
    return 0


def main(args: argparse.Namespace) -> int:
    return run(args, stdin=sys.stdin, stdout=sys.stdout, stderr=sys.stderr)
