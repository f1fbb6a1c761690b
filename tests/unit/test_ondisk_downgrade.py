"""Downgrade (issue 38, scenario 7): a checkpoint written by a newer release is neither trusted nor
thrown away. The agent refuses to start, naming the file, its version and the versions it reads,
and leaves the file and everything it describes (specs, limits files) as they are, because the
newer release's prepared claims still run on the node."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.unit.node.claims import GPUS, NODE
from tests.unit.test_ondisk_fixtures import NoApi
from vgpu_bridge import cli
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node import checkpoint
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.checkpoint import CheckpointCorrupt, CheckpointTooNew
from vgpu_bridge.node.state import DeviceState

UID = "0c1a1d00-0000-4000-8000-000000000001"


def _newer_file(path: Path, version: str = "v2") -> bytes:
    """A file as a release with another checkpoint version could write it: its own claims' shape
    (here one this agent cannot parse) under a checksum this agent can verify."""
    claims = {UID: {"uid": UID, "shares": [{"card": "GPU-aaaa", "memoryBytes": 1}]}}
    canonical = json.dumps(claims, sort_keys=True, separators=(",", ":"))
    checksum = hashlib.sha256(canonical.encode()).hexdigest()
    data = json.dumps({"version": version, "checksum": checksum, "claims": claims}).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def test_a_checkpoint_of_a_newer_version_is_refused_naming_the_file_and_the_versions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "checkpoint.json"
    data = _newer_file(path)
    with pytest.raises(CheckpointTooNew) as refused:
        checkpoint.load(path)
    message = str(refused.value)
    assert str(path) in message
    assert "version 'v2'" in message
    assert "this agent reads v1" in message
    assert "written by a newer release" in message
    assert "upgrade again, or remove" in message
    assert "after draining the node" in message
    assert path.read_bytes() == data


def test_a_newer_version_is_not_corrupt_even_with_a_checksum_of_another_kind(
    tmp_path: Path,
) -> None:
    """A newer release may checksum otherwise: its version alone decides."""
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({"version": "v3", "checksum": "blake3:00", "claims": []}))
    with pytest.raises(CheckpointTooNew, match="version 'v3'"):
        checkpoint.load(path)


@pytest.mark.parametrize("version", ["v0", "1", "v1.5", "V2", "v", "vv2", None])
def test_a_version_that_is_not_newer_and_not_known_stays_corrupt(
    tmp_path: Path, version: str | None
) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({"version": version, "checksum": "", "claims": {}}))
    with pytest.raises(CheckpointCorrupt):
        checkpoint.load(path)


def test_a_version_with_a_known_upgrade_is_read_whatever_its_number(tmp_path: Path) -> None:
    """An entry in MIGRATIONS is an older version by definition, however it is spelt."""
    path = tmp_path / "checkpoint.json"
    claims: dict[str, object] = {}
    canonical = json.dumps(claims, sort_keys=True, separators=(",", ":"))
    checksum = hashlib.sha256(canonical.encode()).hexdigest()
    path.write_text(json.dumps({"version": "v7", "checksum": checksum, "claims": claims}))
    assert checkpoint.load(path, migrations={"v7": lambda c: ("v1", c)}) == {}


def test_the_agent_refuses_to_start_and_leaves_the_node_as_the_newer_release_left_it(
    tmp_path: Path,
) -> None:
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    checkpoint_file = tmp_path / "plugin" / "checkpoint.json"
    data = _newer_file(checkpoint_file)
    spec, limits = layout.spec_path(UID), layout.limits_path(UID)
    for path, text in ((spec, "{}\n"), (limits, "vgpu-bridge-limits 3\n")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    state = DeviceState(NoApi(), node=NODE, profile=DEFAULT, gpus=GPUS, layout=layout,
                        checkpoint_file=checkpoint_file)  # fmt: skip
    with pytest.raises(CheckpointTooNew, match="written by a newer release"):
        state.start()
    state.close()
    assert checkpoint_file.read_bytes() == data
    assert sorted(p.name for p in checkpoint_file.parent.iterdir()) == [
        "agent.lock",
        "checkpoint.json",
    ]  # nothing quarantined
    assert spec.read_text() == "{}\n"
    assert limits.read_text() == "vgpu-bridge-limits 3\n"


def test_the_node_command_says_why_it_cannot_start_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("VGPU_BRIDGE_")]:
        monkeypatch.delenv(name)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("- {uuid: GPU-1, productName: Fake, memory: 1Gi}\n")
    plugin = tmp_path / "plugin"
    _newer_file(plugin / "checkpoint.json")
    argv = ["node", "--node-name", "n", "--mock-gpus", str(gpus), "--kubeconfig", str(kubeconfig),
            "--plugin-dir", str(plugin), "--registry-dir", str(tmp_path / "registry"),
            "--cdi-dir", str(tmp_path / "cdi"), "--vgpu-dir", str(tmp_path / "vgpu"),
            "--metrics-listen", "127.0.0.1:0"]  # fmt: skip
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    assert err.startswith(f"vgpu-bridge node: cannot start: {plugin / 'checkpoint.json'}: ")
    assert "written by a newer release" in err
