"""Pod annotations every dialect shares the meaning of: device choice, sharing mode, placement
hints. Their names are the dialects' (`core/dialects/`); KAI's sharing request is KAI's own."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from vgpu_bridge.core.cel import MAX_EXPRESSION_CHARS, selectors_by_choice
from vgpu_bridge.core.dialects import ANNOTATIONS
from vgpu_bridge.core.dialects.hami import GPU_SCHEDULER_POLICY
from vgpu_bridge.core.errors import shown
from vgpu_bridge.core.models import DeviceFilter, Problems
from vgpu_bridge.core.profiles import DriverProfile

# What a product name or a uuid may contain. Anything else (quotes, backslashes, operators) is
# refused outright: it is a typo at best and a CEL injection attempt at worst.
_TYPE_ITEM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._+/-]{0,63}$")
_UUID_ITEM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,63}$")
_ITEM_RULES = {
    "type": (_TYPE_ITEM, "letters, digits, spaces and - _ . + /"),
    "uuid": (_UUID_ITEM, "letters, digits and - _ . /"),
}
# DeviceFilter field → the annotations it is read from
_FILTER_KEYS = {
    "use_types": ANNOTATIONS.use_types,
    "avoid_types": ANNOTATIONS.avoid_types,
    "use_uuids": ANNOTATIONS.use_uuids,
    "avoid_uuids": ANNOTATIONS.avoid_uuids,
}


def _path(meta_path: str, key: str) -> str:
    return f"{meta_path}.annotations[{key}]"


def _items(
    annotations: Mapping[str, Any],
    keys: tuple[str, ...],
    kind: str,
    *,
    meta_path: str,
    problems: Problems,
    warnings: list[str],
) -> tuple[str, ...]:
    """The comma list under any of `keys`, trimmed, each item checked; () if absent, or if it
    names nothing (blank, or commas only): legacy HAMi and Volcano read that as no constraint."""
    pattern, allowed = _ITEM_RULES[kind]
    found: list[str] = []
    for key in keys:
        if key not in annotations:
            continue
        value = annotations[key]
        path = _path(meta_path, key)
        if not isinstance(value, str):
            problems.add(path, f"must be a string, got {shown(value)}")
            continue
        items = [item.strip() for item in value.split(",") if item.strip()]
        if not items:
            warnings.append(f"{path} names no GPU {kind}: no constraint, as in HAMi and Volcano")
        for item in items:
            if pattern.match(item) is None:
                problems.add(path, f"GPU {kind} {shown(item)} may only contain {allowed}")
            else:
                found.append(item)
    return tuple(dict.fromkeys(found))


def read_filter(
    annotations: Mapping[str, Any],
    *,
    meta_path: str,
    problems: Problems,
    warnings: list[str],
) -> DeviceFilter:
    """`use-gputype` & co. as a filter; empty when none is set. A chosen entry that an avoided
    one rules out is dropped from the choice; the avoided entries stay in it."""

    def items(keys: tuple[str, ...], kind: str) -> tuple[str, ...]:
        return _items(
            annotations, keys, kind, meta_path=meta_path, problems=problems, warnings=warnings
        )

    device_filter = DeviceFilter(
        use_types=items(ANNOTATIONS.use_types, "type"),
        avoid_types=items(ANNOTATIONS.avoid_types, "type"),
        use_uuids=items(ANNOTATIONS.use_uuids, "uuid"),
        avoid_uuids=items(ANNOTATIONS.avoid_uuids, "uuid"),
    )
    return _without_ruled_out(
        device_filter, annotations, meta_path=meta_path, problems=problems, warnings=warnings
    )


def _without_ruled_out(
    device_filter: DeviceFilter,
    annotations: Mapping[str, Any],
    *,
    meta_path: str,
    problems: Problems,
    warnings: list[str],
) -> DeviceFilter:
    """`device_filter` less the chosen entries no GPU can match (`_drop_ruled_out`); as it is
    when no kind is both chosen and avoided (most pods set no filter: a GPU review then skips
    the narrowing and its copy of the filter, ~5 µs of every translation)."""
    if not (device_filter.use_types and device_filter.avoid_types) and not (
        device_filter.use_uuids and device_filter.avoid_uuids
    ):
        return device_filter

    def narrowed(kind: str, chosen: tuple[str, ...], avoided: tuple[str, ...]) -> tuple[str, ...]:
        use, avoid = (_keys_path(annotations, f"{f}_{kind}s", meta_path) for f in ("use", "avoid"))
        return _drop_ruled_out(
            kind, chosen, avoided, paths=(use, avoid), problems=problems, warnings=warnings
        )

    return replace(
        device_filter,
        use_types=narrowed("type", device_filter.use_types, device_filter.avoid_types),
        use_uuids=narrowed("uuid", device_filter.use_uuids, device_filter.avoid_uuids),
    )


def _keys_path(annotations: Mapping[str, Any], field: str, meta_path: str) -> str:
    """The path of the annotation(s) a DeviceFilter field was read from."""
    present = [key for key in _FILTER_KEYS[field] if key in annotations]
    return " and ".join(_path(meta_path, key) for key in present)


def _rules_out(kind: str, avoided: str, chosen: str) -> bool:
    """True when every GPU `chosen` can match is one `avoided` rules out. A type matches the
    product names that contain it, case-insensitively, so a type within it rules out all of
    them (`A100` rules out `a100-80gb`); a uuid matches exactly itself."""
    return avoided.lower() in chosen.lower() if kind == "type" else avoided == chosen


def _ruled_out(kind: str, chosen: tuple[str, ...], avoided: tuple[str, ...]) -> dict[str, str]:
    """Each chosen entry that can match no GPU, with the first avoided entry that rules it out."""
    return {
        entry: next(a for a in avoided if _rules_out(kind, a, entry))
        for entry in chosen
        if any(_rules_out(kind, a, entry) for a in avoided)
    }


def _drop_ruled_out(
    kind: str,
    chosen: tuple[str, ...],
    avoided: tuple[str, ...],
    *,
    paths: tuple[str, str],
    problems: Problems,
    warnings: list[str],
) -> tuple[str, ...]:
    """The chosen entries a GPU can still match. HAMi admits a choice that keeps some
    (`use-gputype: A100,L4` with `nouse-gputype: A100` picks L4 cards), so the others are
    dropped with a warning; when the avoided entries rule out every one, it is refused."""
    lost = _ruled_out(kind, chosen, avoided)
    if not lost:
        return chosen
    use_path, avoid_path = paths
    which = ", ".join(f"{entry!r} by {by!r}" for entry, by in lost.items())
    kept = tuple(entry for entry in chosen if entry not in lost)
    if kept:
        warnings.append(
            f"{use_path}: dropped what {avoid_path} rules out ({which}); GPUs are chosen by "
            + ", ".join(map(repr, kept))
        )
        return kept
    problems.add(
        use_path,
        f"{avoid_path} rules out every GPU {kind} it names ({which}): no GPU can be both chosen "
        "and avoided",
    )
    return chosen


def check_selector_lengths(
    device_filter: DeviceFilter,
    profile: DriverProfile,
    annotations: Mapping[str, Any],
    *,
    meta_path: str,
    problems: Problems,
) -> None:
    """The API server refuses a CEL selector over 10 KiB: say so here, naming the annotation."""
    for field, expression in selectors_by_choice(device_filter, profile).items():
        if len(expression) > MAX_EXPRESSION_CHARS:
            problems.add(
                _keys_path(annotations, field, meta_path),
                f"lists too many GPUs: its CEL selector would be {len(expression)} characters, "
                f"and the API server takes at most {MAX_EXPRESSION_CHARS}",
            )


def check_mode(
    annotations: Mapping[str, Any], *, meta_path: str, problems: Problems, warnings: list[str]
) -> None:
    """`vgpu-mode: mig` is refused; other modes other than hami-core are served as a share."""
    for key in ANNOTATIONS.mode:
        value = annotations.get(key)
        if not isinstance(value, str):
            continue
        mode = value.strip().lower()
        if "mig" in mode:
            problems.add(
                _path(meta_path, key),
                f"{shown(value)} asks for MIG hardware isolation, which a software share cannot "
                "give; request a MIG device from the NVIDIA DRA driver instead",
            )
        elif mode not in ("", "hami-core"):
            warnings.append(f"{key}={shown(value)} is served as a software share (hami-core mode)")


MUTEX = "mutex"


def wants_mutex(annotations: Mapping[str, Any]) -> bool:
    """True when HAMi's GPU scheduler policy lists `mutex` (only cards no one else uses)."""
    value = annotations.get(GPU_SCHEDULER_POLICY)
    return isinstance(value, str) and MUTEX in (p.strip().lower() for p in value.split(","))


def placement_warnings(annotations: Mapping[str, Any]) -> list[str]:
    """Placement hints are the scheduler's job under DRA: kept on the pod, but not acted on.
    `mutex` is the exception: it asks for a card no one else uses, so each card is booked whole."""
    mutex = GPU_SCHEDULER_POLICY if wants_mutex(annotations) else None
    return [
        f"{key}={shown(annotations[key])}: each GPU is booked whole (all its memory, cores 100), "
        "so no other share lands on it"
        if key == mutex
        else f"{key}={shown(annotations[key])} is not acted on: with DRA, placement is the "
        "scheduler's job"
        for key in ANNOTATIONS.placement
        if key in annotations
    ]
