"""What this agent has prepared, kept across restarts: a versioned, checksummed JSON file.

Prepare reads it first (a prepared claim answers from here, with the same CDI IDs, and without
calling the API), Unprepare works from it alone (the claim may be gone). Written atomically,
without fsync (see `save`), after every change. A file that does not parse, has another version
or fails its checksum is `CheckpointCorrupt`, and so is anything that is not a regular file of
at most MAX_BYTES (a directory, a FIFO: never read, never waited on), bytes that are not UTF-8
and JSON nested too deep to parse: the agent moves it aside (`quarantine`, keeping the last
KEEP_QUARANTINED) and rebuilds from the API, it never crash-loops or hangs.

Upgrades: a file of an older version is read through `MIGRATIONS` (version -> a function that
turns that version's claims into the next version's, and that version's name), one step at a
time, after its own checksum is verified; the result is checked as this version and rewritten as
this version at once. When VERSION changes, the old one gets an entry here (NVIDIA's driver
migrates its checkpoint the same way, V1 to V2). A version with no path to VERSION is corrupt.

Downgrades: a file of a later version than VERSION (`vN`, N greater, with no entry in MIGRATIONS)
was written by a newer release, whose claims still run on the node: it is `CheckpointTooNew`, and
the agent refuses to start, naming the file and the versions it reads, and leaves it as it is
(never quarantined and rebuilt: the rebuild would prepare those claims again by this release's
rules, and the start would remove what it does not know). Fixtures of each release's files
(tests/fixtures/ondisk/<commit>/, read by tests/unit/test_ondisk_*) keep the previous release's
file readable.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vgpu_bridge.atomic_files import write_atomic
from vgpu_bridge.node import names
from vgpu_bridge.node.files import UnsafeFile, read_regular, remove_tree

VERSION = "v1"
MAX_BYTES = 64 * 2**20  # ~10,000 claims of 16 shares each; a bigger file is not ours
MAX_CLAIMS = 10_000  # claims whose entry is kept between saves
KEEP_QUARANTINED = 3
QUARANTINE_SUFFIX = ".corrupt-"


class CheckpointCorrupt(ValueError):
    """The checkpoint file exists but cannot be trusted."""


class CheckpointTooNew(OSError):
    """The checkpoint was written by a newer release (a downgrade): this agent cannot read it, and
    must not drop it either, since the claims it lists still run on the node. Not
    `CheckpointCorrupt` (quarantined and rebuilt); an OSError, like a file the agent cannot
    read, so that the agent's start fails with this message and exit status 1 (`app.main`)."""


#: the claims of one version (as JSON) -> (the next version, its claims)
Migration = Callable[[Any], tuple[str, Any]]
# Empty while v1 is the only version ever written; the next version adds {"v1": v1_to_v2}.
MIGRATIONS: Mapping[str, Migration] = {}


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
    cdi_spec: str = Field(description="the spec file's text, to rewrite it after a reboot")

    @field_validator("uid")
    @classmethod
    def _uid(cls, value: str) -> str:
        return names.check_uid(value)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return names.check_namespace(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return names.check_name(value)


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str
    checksum: str
    claims: dict[str, PreparedClaim]


def _canonical(claims: dict[str, PreparedClaim]) -> str:
    """`json.dumps(claims, sort_keys=True, separators=(",", ":"))`, from each claim's own text."""
    return "{" + ",".join(_entry(uid, claims[uid]) for uid in sorted(claims)) + "}"


#: uid -> (the claim, its `"uid":{...}` entry): a dense node's burst saves the file after each
#: Prepare, and serialising every claim again made each save cost as much as all the claims
#: before it (issue 26: 384 claims, 12 ms a save). Found by the claim's identity (the agent keeps
#: its claims as objects that never change), so a hit costs no hash of the claim's fields.
_ENTRIES: dict[str, tuple[PreparedClaim, str]] = {}


def _entry(uid: str, claim: PreparedClaim) -> str:
    known = _ENTRIES.get(uid)
    if known is not None and known[0] is claim:
        return known[1]
    text = json.dumps(claim.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    entry = f"{json.dumps(uid)}:{text}"
    if len(_ENTRIES) >= MAX_CLAIMS:
        _ENTRIES.clear()  # more claims than a node holds: start over rather than grow
    _ENTRIES[uid] = (claim, entry)
    return entry


def _checksum(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()


def load(
    path: Path, *, migrations: Mapping[str, Migration] = MIGRATIONS
) -> dict[str, PreparedClaim]:
    """The prepared claims by uid; {} when there is no file yet. A file of an older version is
    upgraded through `migrations` and rewritten as VERSION."""
    raw = _read_json(path)
    if raw is None:
        return {}
    version = raw.get("version")
    if _is_newer(version, migrations):
        raise CheckpointTooNew(
            f"{path}: version {version!r} was written by a newer release (this agent reads "
            f"{_known(migrations)}): upgrade again, or remove {path} after draining the node"
        )
    if not isinstance(version, str) or (version != VERSION and version not in migrations):
        raise CheckpointCorrupt(f"{path}: version {version!r}, this agent reads {VERSION}")
    if not isinstance(raw.get("claims"), dict) or raw.get("checksum") != _checksum(
        json.dumps(raw["claims"], sort_keys=True, separators=(",", ":"))
    ):
        raise CheckpointCorrupt(f"{path}: checksum mismatch")
    claims = _upgraded(path, version, raw["claims"], migrations)
    try:
        parsed = _File.model_validate({**raw, "version": VERSION, "claims": claims})
    except ValidationError as exc:
        raise CheckpointCorrupt(f"{path}: {exc.error_count()} invalid fields") from None
    if version != VERSION:
        save(path, parsed.claims)
    return parsed.claims


def _version_number(version: object) -> int | None:
    """N of a version spelt `vN` (how every version is named), else None."""
    found = re.fullmatch(r"v([0-9]{1,9})", version) if isinstance(version, str) else None
    return int(found.group(1)) if found else None


def _is_newer(version: object, migrations: Mapping[str, Migration]) -> bool:
    """Whether `version` is a later one than VERSION (and not one `migrations` knows): only a
    newer release writes it. Anything else unknown stays corrupt."""
    number, ours = _version_number(version), _version_number(VERSION)
    return number is not None and ours is not None and number > ours and version not in migrations


def _known(migrations: Mapping[str, Migration]) -> str:
    """The versions this agent reads, for a message: VERSION, and those it upgrades from."""
    return ", ".join([VERSION, *sorted(v for v in migrations if v != VERSION)])


def _read_json(path: Path) -> dict[str, Any] | None:
    """The file's JSON object (None when there is no file), never following a link or waiting
    on a FIFO."""
    try:
        data = read_regular(path, max_bytes=MAX_BYTES)
    except FileNotFoundError:
        return None
    except UnsafeFile as exc:
        raise CheckpointCorrupt(str(exc)) from None
    try:
        raw = json.loads(data.decode())
    except ValueError as exc:  # UnicodeDecodeError is one too
        raise CheckpointCorrupt(f"{path}: not JSON: {exc}") from None
    except RecursionError:
        raise CheckpointCorrupt(f"{path}: not JSON: nested too deep") from None
    if not isinstance(raw, dict):
        raise CheckpointCorrupt(f"{path}: version None, this agent reads {VERSION}")
    return raw


def _upgraded(path: Path, version: str, claims: Any, migrations: Mapping[str, Migration]) -> Any:
    """`claims` of `version` as VERSION's, one migration at a time."""
    seen = {version}
    while version != VERSION:
        step = migrations.get(version)
        if step is None:
            raise CheckpointCorrupt(f"{path}: no upgrade from version {version!r} to {VERSION}")
        try:
            version, claims = step(claims)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise CheckpointCorrupt(f"{path}: cannot upgrade from {version!r}: {exc}") from None
        if version in seen:
            raise CheckpointCorrupt(f"{path}: upgrades from {version!r} go round in a circle")
        seen.add(version)
    return claims


def save(path: Path, claims: dict[str, PreparedClaim]) -> None:
    """One serialisation: the checksum covers exactly the claims text written."""
    canonical = _canonical(claims)
    text = f'{{"version":"{VERSION}","checksum":"{_checksum(canonical)}","claims":{canonical}}}\n'
    # Atomic (rename), not fsynced: every entry can be had again, so a crash that loses the last
    # write, or tears the file, is safe: Prepare re-reads a missing claim from the API and gets
    # the same CDI IDs (they derive from the claim uid), Unprepare needs only the uid, and a torn
    # file is `CheckpointCorrupt`, rebuilt from the API. fsync cost 10-60 ms on a busy disk.
    write_atomic(path, text.encode(), mode=0o600, durable=False)


def quarantine(path: Path) -> Path:
    """Move a corrupt checkpoint (whatever it is: file, directory, FIFO) aside for a person to
    look at, keeping only the newest KEEP_QUARANTINED; where it went."""
    now = time.time_ns()
    stamp = f"{time.strftime('%Y%m%dT%H%M%S', time.localtime(now // 10**9))}.{now % 10**9:09d}"
    aside = path.with_name(f"{path.name}{QUARANTINE_SUFFIX}{stamp}")
    os.replace(path, aside)
    pattern = re.compile(re.escape(path.name + QUARANTINE_SUFFIX) + r"[0-9T.]+")
    kept = sorted(name for name in os.listdir(path.parent) if pattern.fullmatch(name))
    for name in kept[:-KEEP_QUARANTINED]:
        remove_tree(path.parent, path.parent / name)
    return aside
