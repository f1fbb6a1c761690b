"""The real node's containerd and kubelet configurations carry what this VM needs (realnode.md)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from e2e.realnode import containerd, kubelet
from e2e.realnode.host import Layout, mounts_under, read_sysctls
from e2e.realnode.node import our_processes, remove_tree
from e2e.waiting import wait_for

LAYOUT = Layout(root=Path("/x/root"), run=Path("/x/run"), cgroup_name="cg")


def test_containerd_config_clamps_oom_score_and_uses_our_paths_only() -> None:
    config = tomllib.loads(containerd.render_config(LAYOUT, Path("/bin-dir")))
    assert config["version"] == 3
    assert config["root"] == "/x/root/containerd"
    assert config["state"] == "/x/run/containerd"
    assert config["grpc"]["address"] == "/x/run/containerd.sock"
    assert "io.containerd.nri.v1.nri" in config["disabled_plugins"]
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["enable_cdi"] is True
    assert runtime["cdi_spec_dirs"] == ["/x/run/cdi"]
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["options"] == {
        "BinaryName": "/bin-dir/runc",
        "Root": "/x/run/runc",
        "SystemdCgroup": False,
    }
    assert config["plugins"]["io.containerd.shim.v1.manager"]["socket_dir"] == "/x/run/s"
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == containerd.SANDBOX_IMAGE


def test_cni_network_never_routes_or_masquerades() -> None:
    (plugin,) = json.loads(containerd.cni_conflist())["plugins"]
    assert plugin["isGateway"] is False
    assert plugin["ipMasq"] is False


def test_kubelet_config_for_a_cgroup_v1_vm_without_iptables() -> None:
    config = yaml.safe_load(
        kubelet.render_config(LAYOUT, port=1, healthz_port=2, ca_file=Path("/ca.crt"))
    )
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/cg"
    assert config["makeIPTablesUtilChains"] is False
    assert config["containerRuntimeEndpoint"] == "unix:///x/run/containerd.sock"
    assert config["evictionHard"]["nodefs.available"] == "200Mi"
    assert config["imageGCHighThresholdPercent"] == 100
    assert config["address"] == "127.0.0.1"
    assert config["readOnlyPort"] == 0


def test_kubelet_sysctls_are_readable() -> None:
    assert read_sysctls()["vm/overcommit_memory"] in {"0", "1", "2"}


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_remove_tree_never_deletes_through_a_mount(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    top = tmp_path / "state"
    (top / "sub" / "mnt").mkdir(parents=True)
    (top / "sub" / "file").write_text("x")
    subprocess.run(["mount", "--bind", str(outside), str(top / "sub" / "mnt")], check=True)
    try:
        assert mounts_under(top) == [str(top / "sub" / "mnt")]
        notes = remove_tree(top)
        assert notes
        assert (outside / "precious").read_text() == "keep"
    finally:
        subprocess.run(["umount", str(top / "sub" / "mnt")], check=True)
    assert remove_tree(top) == []
    assert not top.exists()
    assert (outside / "precious").read_text() == "keep"


def test_only_our_programs_naming_our_paths_count_as_ours(tmp_path: Path) -> None:
    layout = Layout(root=tmp_path / "root", run=tmp_path / "run", cgroup_name="no-such-cgroup")
    fake_containerd = tmp_path / "containerd"
    shutil.copy2("/bin/sh", fake_containerd)  # a shell named like one of our programs
    hold = "sleep 300; :"

    def start(*argv: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, start_new_session=True)  # a group: the shell and its sleep

    ours = start(str(fake_containerd), "-c", hold, f"{layout.root}/config")
    # a process of someone else that merely names our path (an editor, a shell) is never ours
    theirs = start("/bin/sh", "-c", hold, str(layout.root))
    unrelated = start(str(fake_containerd), "-c", hold, "/var/lib/elsewhere")
    try:
        wait_for(lambda: ours.pid in our_processes(layout), timeout_s=10, what="our process")
        found = our_processes(layout)
        assert theirs.pid not in found
        assert unrelated.pid not in found
    finally:
        for process in (ours, theirs, unrelated):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert not our_processes(layout)
