"""The checkpoint: round trip, and every way a file can be untrustworthy is `CheckpointCorrupt`."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from vgpu_bridge.node import checkpoint
from vgpu_bridge.node.checkpoint import CheckpointCorrupt, PreparedClaim, PreparedDevice

CLAIM = PreparedClaim(
    uid="0c1a1d00-0000-4000-8000-000000000001",
    namespace="team-a",
    name="c",
    devices=(
        PreparedDevice(
            request_names=("gpu",),
            pool_name="node-a",
            device_name="gpu-0",
            share_id="s-1",
            cdi_device_ids=("k8s.gpu.vgpu-bridge.io/claim=0c1a1d00-0000-4000-8000-000000000001-0",),
            uuid="GPU-aaaa",
            memory=3000 * 2**20,
            cores=30,
        ),
    ),
    priority=None,
    cdi_spec='{"cdiVersion": "0.6.0"}\n',
)


def test_no_file_is_nothing_prepared(tmp_path: Path) -> None:
    assert checkpoint.load(tmp_path / "checkpoint.json") == {}


def test_round_trip_keeps_every_field_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint.save(path, {"0c1a1d00-0000-4000-8000-000000000001": CLAIM})
    assert checkpoint.load(path) == {"0c1a1d00-0000-4000-8000-000000000001": CLAIM}
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.json"]
    assert json.loads(path.read_text())["version"] == "v1"


def _tamper(path: Path, how: str) -> None:
    data = json.loads(path.read_text())
    if how == "truncated":
        path.write_text(path.read_text()[:40])
    elif how == "other version":
        path.write_text(json.dumps({**data, "version": "v0"}))  # older, no upgrade known
    elif how == "edited":
        data["claims"]["0c1a1d00-0000-4000-8000-000000000001"]["devices"][0]["cores"] = 100
        path.write_text(json.dumps(data))
    elif how == "wrong shape":
        data["claims"]["0c1a1d00-0000-4000-8000-000000000001"]["devices"] = "all of them"
        path.write_text(json.dumps(data))
    elif how == "not an object":
        path.write_text("[]")


@pytest.mark.parametrize(
    "how", ["truncated", "other version", "edited", "wrong shape", "not an object"]
)
def test_an_untrustworthy_file_is_corrupt(tmp_path: Path, how: str) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint.save(path, {"0c1a1d00-0000-4000-8000-000000000001": CLAIM})
    _tamper(path, how)
    with pytest.raises(CheckpointCorrupt, match=r"checkpoint\.json"):
        checkpoint.load(path)


def _plant(path: Path, how: str) -> None:
    if how == "not UTF-8":
        path.write_bytes(b'{"version": "v1", "claims": {"\xff\xfe": 1}}')
    elif how == "100k-deep JSON":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif how == "a directory":
        (path / "inside").mkdir(parents=True)
    elif how == "a FIFO":
        os.mkfifo(path)
    elif how == "a symlink":
        path.symlink_to("/dev/zero")
    elif how == "a uid that is a path":  # checksummed right: the uid itself is refused
        claims = {"x": {**CLAIM.model_dump(mode="json"), "uid": "../../../../etc"}}
        canonical = json.dumps(claims, sort_keys=True, separators=(",", ":"))
        checksum = hashlib.sha256(canonical.encode()).hexdigest()
        path.write_text(json.dumps({"version": "v1", "checksum": checksum, "claims": claims}))


CORRUPT = ["not UTF-8", "100k-deep JSON", "a directory", "a FIFO", "a symlink",
           "a uid that is a path"]  # fmt: skip


@pytest.mark.parametrize("how", CORRUPT)
def test_whatever_is_in_its_place_is_corrupt_promptly(tmp_path: Path, how: str) -> None:
    path = tmp_path / "checkpoint.json"
    _plant(path, how)
    outcome: list[object] = []

    def load() -> None:
        try:
            outcome.append(checkpoint.load(path))
        except CheckpointCorrupt as error:
            outcome.append(error)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(timeout=10)  # generous: a FIFO would block the open forever
    assert not thread.is_alive()
    assert isinstance(outcome[0], CheckpointCorrupt)


@pytest.mark.parametrize("how", ["a directory", "a FIFO", "truncated"])
def test_quarantine_moves_anything_aside_and_keeps_the_newest_three(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "checkpoint.json"
    moved = []
    for _ in range(5):
        if how == "truncated":
            path.write_text('{"version": "v1", "cla')
        else:
            _plant(path, how)
        moved.append(checkpoint.quarantine(path).name)
    assert not path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(moved[-3:])
    assert all(name.startswith("checkpoint.json.corrupt-") for name in moved)


# --- upgrades -----------------------------------------------------------------------------------
# A synthetic v0, as an older agent could have written it: memory in MiB (`memory_mib`) and
# request names as one comma-separated string. v1 has bytes and a list.


def _v0_to_v1(claims: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    upgraded = {}
    for uid, claim in claims.items():
        devices = []
        for device in claim["devices"]:
            fields = {k: v for k, v in device.items() if k not in ("memory_mib", "request_names")}
            memory = device["memory_mib"] * 2**20
            names = device["request_names"].split(",")
            devices.append({**fields, "memory": memory, "request_names": names})
        upgraded[uid] = {**claim, "devices": devices}
    return "v1", upgraded


V0 = {"v0": _v0_to_v1}


def _write(path: Path, version: str, claims: dict[str, Any]) -> None:
    canonical = json.dumps(claims, sort_keys=True, separators=(",", ":"))
    checksum = hashlib.sha256(canonical.encode()).hexdigest()
    path.write_text(json.dumps({"version": version, "checksum": checksum, "claims": claims}))


def _v0_claims() -> dict[str, Any]:
    claim = CLAIM.model_dump(mode="json")
    (device,) = claim["devices"]
    device = {k: v for k, v in device.items() if k not in ("memory", "request_names")}
    device.update(memory_mib=3000, request_names="gpu")
    return {CLAIM.uid: {**claim, "devices": [device]}}


def test_an_older_version_is_read_through_its_upgrade_and_rewritten_as_this_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "checkpoint.json"
    _write(path, "v0", _v0_claims())
    assert checkpoint.load(path, migrations=V0) == {CLAIM.uid: CLAIM}
    assert json.loads(path.read_text())["version"] == checkpoint.VERSION
    assert checkpoint.load(path) == {CLAIM.uid: CLAIM}  # now readable with no upgrade at all


def test_this_version_is_never_rewritten_on_read(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint.save(path, {CLAIM.uid: CLAIM})
    before = path.stat()
    checkpoint.load(path, migrations=V0)
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def _broken_step(claims: Any) -> tuple[str, Any]:
    return "v1", claims["missing"]


UNUSABLE = [
    ("no upgrade known", {}, "v0", "version 'v0', this agent reads v1"),
    ("edited before the upgrade", V0, "v0-edited", "checksum mismatch"),
    ("the upgrade fails", {"v0": _broken_step}, "v0", "cannot upgrade from 'v0': 'missing'"),
    ("upgrades in a circle", {"v0": lambda c: ("v00", c), "v00": lambda c: ("v0", c)}, "v0",
     "go round in a circle"),
    ("upgraded into nonsense", {"v0": lambda c: ("v1", c)}, "v0", "invalid fields"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "migrations", "version", "message"), UNUSABLE, ids=[u[0] for u in UNUSABLE]
)
def test_an_older_file_that_cannot_be_upgraded_is_corrupt_and_left_as_it_was(
    tmp_path: Path, case: str, migrations: dict[str, Any], version: str, message: str
) -> None:
    path = tmp_path / "checkpoint.json"
    _write(path, "v0", _v0_claims())
    if version == "v0-edited":
        data = json.loads(path.read_text())
        data["claims"][CLAIM.uid]["devices"][0]["memory_mib"] = 80000
        path.write_text(json.dumps(data))
    before = path.read_bytes()
    with pytest.raises(CheckpointCorrupt, match=message):
        checkpoint.load(path, migrations=migrations)
    assert path.read_bytes() == before


def test_the_written_text_is_every_claim_serialised_with_sorted_keys(tmp_path: Path) -> None:
    """Each claim's text is made once and joined (a dense node saves after every Prepare); the
    file is byte for byte what serialising the whole map with sorted keys gives, so files that
    earlier agents wrote keep their checksums."""
    claims = {
        f"0c1a1d00-0000-4000-8000-00000000000{n}": CLAIM.model_copy(
            update={
                "uid": f"0c1a1d00-0000-4000-8000-00000000000{n}",
                "name": f"c{n}",
                "priority": n % 2 or None,
                "cdi_spec": f'{{"note": "caf\u00e9 \\"{n}\\"\\n"}}',
            }
        )
        for n in (7, 2, 9, 1)
    }
    path = tmp_path / "checkpoint.json"
    checkpoint.save(path, claims)
    whole = {uid: claim.model_dump(mode="json") for uid, claim in claims.items()}
    expected = json.dumps(whole, sort_keys=True, separators=(",", ":"))
    written = json.loads(path.read_text())
    assert json.dumps(written["claims"], sort_keys=True, separators=(",", ":")) == expected
    assert written["checksum"] == hashlib.sha256(expected.encode()).hexdigest()
    assert path.read_text().endswith(f'"claims":{expected}}}\n')
    assert checkpoint.load(path) == claims
