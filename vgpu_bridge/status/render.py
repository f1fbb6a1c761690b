"""The status report as text: tables (`table`, `wide`) or a document (`json`, `yaml`). Pure.

In documents sizes are bytes and cores SM percent; `null` is "not known" (no agent read, nothing
recorded). Tables print sizes in binary units and "-" for not known.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import yaml

from vgpu_bridge.core.quantity import MiB, format_bytes
from vgpu_bridge.status.model import Card, PendingPod, Report, Share

FORMATS = ("table", "wide", "json", "yaml")
REASON_WIDTH = 100  # a scheduler's message is long; `wide` prints it whole
NO_CARDS = "No cards of the driver in view (no ResourceSlices of it, or see the notes)."


def render(report: Report, output: str) -> str:
    """`report` in one of `FORMATS`; ValueError naming the format otherwise."""
    if output == "json":
        return json.dumps(as_document(report), indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(as_document(report), sort_keys=False)
    if output in ("table", "wide"):
        return tables(report, wide=output == "wide")
    raise ValueError(f"output: must be one of {', '.join(FORMATS)}, got {output!r}")


def as_document(report: Report) -> dict[str, Any]:
    return {
        "cards": [_card_document(card) for card in report.cards],
        "unplacedShares": [_share_document(share) for share in report.unplaced],
        "pending": [_pending_document(pod) for pod in report.pending],
        "notes": list(report.notes),
    }


def _card_document(card: Card) -> dict[str, Any]:
    return {
        "node": card.node, "device": card.device, "uuid": card.uuid, "product": card.product,
        "memory": card.memory, "bookedMemory": card.booked_memory,
        "freeMemory": card.free_memory, "usedMemory": card.used_memory,
        "cores": card.cores, "bookedCores": card.booked_cores, "freeCores": card.free_cores,
        "shares": [_share_document(share) for share in card.shares],
    }  # fmt: skip


def _share_document(share: Share) -> dict[str, Any]:
    return {
        "namespace": share.namespace, "pod": share.pod or None,
        "containers": list(share.containers), "claim": share.claim, "claimUID": share.claim_uid,
        "node": share.node, "device": share.device, "memory": share.memory,
        "cores": share.cores, "priority": share.priority, "usedMemory": share.used_memory,
        "smUtilisation": share.sm_utilisation,
    }  # fmt: skip


def _pending_document(pod: PendingPod) -> dict[str, Any]:
    return {
        "namespace": pod.namespace, "pod": pod.pod,
        "scheduler": pod.scheduler, "reason": pod.reason,
    }  # fmt: skip


def size(count: int | None) -> str:
    """Bytes in binary units: exact where a whole number of MiB (`3000Mi`, `80Gi`), else MiB
    with one decimal; `-` for not known."""
    if count is None:
        return "-"
    if count % MiB == 0:
        return format_bytes(count)
    return f"{count / MiB:.1f}Mi"


def _number(value: int | None) -> str:
    return "-" if value is None else str(value)


def tables(report: Report, *, wide: bool = False) -> str:
    """The cards, then every share (on its card, or unplaced), then pending pods; notes last."""
    shares = [*(share for card in report.cards for share in card.shares), *report.unplaced]
    uuids = {(card.node, card.device): card.uuid for card in report.cards}
    parts = [table(CARD_COLUMNS, report.cards, wide=wide) if report.cards else NO_CARDS]
    if shares:
        rows = [(share, uuids.get((share.node, share.device), "")) for share in shares]
        parts.append(table(SHARE_COLUMNS, rows, wide=wide))
    if report.pending:
        parts.append(table(PENDING_COLUMNS, report.pending, wide=wide))
    parts += [f"note: {note}" for note in report.notes]
    return "\n\n".join(parts) + "\n"


Column = tuple[str, Callable[[Any], str], bool]  # header, cell, only in `wide`

CARD_COLUMNS: Sequence[Column] = (
    ("NODE", lambda c: c.node, False),
    ("DEVICE", lambda c: c.device, False),
    ("UUID", lambda c: c.uuid, True),
    ("PRODUCT", lambda c: c.product, False),
    ("MEMORY", lambda c: size(c.memory), False),
    ("BOOKED", lambda c: size(c.booked_memory), False),
    ("FREE", lambda c: size(c.free_memory), False),
    ("USED", lambda c: size(c.used_memory), False),
    # a card without cores to book (NVIDIA's memory and unlimited modes): "-"
    ("CORES", lambda c: f"{c.booked_cores}/{c.cores}" if c.cores else "-", False),
    ("FREE-CORES", lambda c: str(c.free_cores) if c.cores else "-", False),
    ("SHARES", lambda c: str(len(c.shares)), False),
)
SHARE_COLUMNS: Sequence[Column] = (
    ("NODE", lambda r: r[0].node, False),
    ("DEVICE", lambda r: r[0].device, False),
    ("UUID", lambda r: r[1] or "-", True),
    ("NAMESPACE/POD", lambda r: f"{r[0].namespace}/{r[0].pod or '-'}", False),
    ("CONTAINERS", lambda r: ",".join(r[0].containers) or "-", False),
    ("CLAIM", lambda r: r[0].claim, False),
    ("MEMORY", lambda r: size(r[0].memory), False),
    ("CORES", lambda r: _number(r[0].cores), False),
    ("PRIORITY", lambda r: _number(r[0].priority), False),
    ("USED", lambda r: size(r[0].used_memory), False),
    ("SM%", lambda r: _number(r[0].sm_utilisation), False),
)
PENDING_COLUMNS: Sequence[Column] = (
    ("PENDING NAMESPACE/POD", lambda p: f"{p.namespace}/{p.pod}", False),
    ("SCHEDULER", lambda p: p.scheduler, False),
    ("REASON", lambda p: p.reason, False),
)


def table(columns: Sequence[Column], rows: Sequence[Any], *, wide: bool) -> str:
    """Left-aligned columns two spaces apart, kubectl's way; `wide` adds the wide-only columns
    and prints long reasons whole."""
    shown = [(header, cell) for header, cell, wide_only in columns if wide or not wide_only]
    lines = [[header for header, _ in shown]]
    lines += [[_cut(cell(row), wide) for _, cell in shown] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(shown))]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _cut(text: str, wide: bool) -> str:
    text = " ".join(text.split())  # a scheduler's message may hold newlines
    if wide or len(text) <= REASON_WIDTH:
        return text
    return text[: REASON_WIDTH - 3] + "..."
