"""What this agent has prepared, kept across restarts: a versioned, checksummed JSON file.

Prepare reads it first (a prepared claim answers from here, with the same CDI IDs, and without
calling the API), Unprepare works from it alone (the claim may be gone). Written atomically after
every change. A file that does not parse, has another version or fails its checksum is
`CheckpointCorrupt`: the agent moves it aside and rebuilds from the API, it never crash-loops.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vgpu_bridge.node.files import write_atomic

VERSION = "v1"


class CheckpointCorrupt(ValueError):
    """The checkpoint file exists but cannot be trusted."""


class PreparedDevice(BaseModel):
    """One device entry of a NodePrepareResources answer, plus the share it carries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    share_id: str | None
    cdi_device_ids: tuple[str, ...]
    uuid: str
    memory: int  # bytes
    cores: int


class PreparedClaim(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]
    priority: int | None = None
    cdi_spec: dict[str, Any] = Field(description="the spec written, to rewrite it after a reboot")


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str
    checksum: str
    claims: dict[str, PreparedClaim]


def _checksum(claims: dict[str, PreparedClaim]) -> str:
    canonical = json.dumps(
        {uid: claim.model_dump(mode="json") for uid, claim in sorted(claims.items())},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def load(path: Path) -> dict[str, PreparedClaim]:
    """The prepared claims by uid; {} when there is no file yet."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise CheckpointCorrupt(f"{path}: not JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        version = raw.get("version") if isinstance(raw, dict) else None
        raise CheckpointCorrupt(f"{path}: version {version!r}, this agent reads {VERSION}")
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as exc:
        raise CheckpointCorrupt(f"{path}: {exc.error_count()} invalid fields") from None
    if parsed.checksum != _checksum(parsed.claims):
        raise CheckpointCorrupt(f"{path}: checksum mismatch")
    return parsed.claims


def save(path: Path, claims: dict[str, PreparedClaim]) -> None:
    body = _File(version=VERSION, checksum=_checksum(claims), claims=claims)
    write_atomic(path, body.model_dump_json(indent=1).encode() + b"\n", mode=0o600)
