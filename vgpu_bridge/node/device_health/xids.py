"""Which NVIDIA XID errors make a card unhealthy (from the meanings NVIDIA documents for each).

Only errors of the card itself count: its memory (ECC), its bus, its links, its firmware. Errors
that one application causes and that end with that application (a bad kernel, a page fault) leave
the card schedulable, as does an XID this list does not know (logged, never guessed).
"""

from __future__ import annotations

from collections.abc import Mapping

#: XIDs after which no new share should land on the card until it is reset or replaced
CARD_XIDS: Mapping[int, str] = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded (a reset is pending)",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (row remapping pending a reset)",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}

#: XIDs an application causes; the card stays healthy
APPLICATION_XIDS: Mapping[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
    68: "video processor exception",
    109: "context switch timeout",
}

LOST = "gpu-lost"


def reason_for_xid(xid: int) -> str | None:
    """The taint value for `xid` (`"xid-79"`), or None when it leaves the card healthy."""
    return f"xid-{xid}" if xid in CARD_XIDS else None


def meaning(xid: int) -> str:
    """What NVIDIA says `xid` means, for the log."""
    return CARD_XIDS.get(xid) or APPLICATION_XIDS.get(xid) or "not in our list"
