"""The pieces of the kind tier that decide something, checked without Docker: the runtime wrapper
(run for real over a stand-in runc), the capability check, the cluster config this host gets,
the node's containerd config, the pod network, dockerd's flags and the Dockerfiles' bases."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from e2e.cluster.settings import REPO_ROOT
from e2e.kind import dockerd
from e2e.kind.build import COREDNS_DIR, COREDNS_VERSION, GOTOOLS_DIR
from e2e.kind.chartimages import DOCKERFILES
from e2e.kind.cluster import cluster_config
from e2e.kind.network import conflist
from e2e.kind.nodeimage import IMAGE_REPOSITORY, containerd_config

pytestmark = pytest.mark.e2e
ALL_CAPS = ["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"]
STAND_IN_RUNC = """#!/bin/sh
printf '%s\\n' "$@" > "$(dirname "$0")/args"
"""


@pytest.fixture
def wrapper(tmp_path: Path) -> Path:
    runc = tmp_path / "runc"
    runc.write_text(STAND_IN_RUNC)
    runc.chmod(0o755)
    path = tmp_path / "wrapper"
    path.write_text(dockerd.WRAPPER.format(python=sys.executable, runc=str(runc)))
    path.chmod(0o755)
    return path


def capabilities(names: list[str]) -> dict[str, list[str]]:
    return {kind: list(names) for kind in ("bounding", "effective", "permitted")}


def test_wrapper_drops_cap_sys_resource_from_a_bundle_and_runs_runc_with_the_same_args(
    wrapper: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    spec = {"ociVersion": "1.2.0", "process": {"capabilities": capabilities(ALL_CAPS)}}
    (bundle / "config.json").write_text(json.dumps(spec))
    args = ["--root", "/run/x", "create", "--bundle", str(bundle), "c1"]
    subprocess.run([str(wrapper), *args], check=True)
    written = json.loads((bundle / "config.json").read_text())
    assert written["process"]["capabilities"] == capabilities(["CAP_CHOWN", "CAP_SYS_ADMIN"])
    assert written["ociVersion"] == "1.2.0"
    assert (tmp_path / "args").read_text().split() == args


def test_wrapper_drops_it_from_an_exec_process_file(wrapper: Path, tmp_path: Path) -> None:
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["sh"], "capabilities": capabilities(ALL_CAPS)}))
    subprocess.run([str(wrapper), "exec", "--process", str(process), "c1"], check=True)
    written = json.loads(process.read_text())
    assert written["capabilities"] == capabilities(["CAP_CHOWN", "CAP_SYS_ADMIN"])
    assert written["args"] == ["sh"]


def test_wrapper_leaves_other_commands_alone(wrapper: Path, tmp_path: Path) -> None:
    subprocess.run([str(wrapper), "delete", "--force", "c1"], check=True, cwd=tmp_path)
    assert (tmp_path / "args").read_text().split() == ["delete", "--force", "c1"]


@pytest.mark.parametrize(
    ("bounding", "lacks"),
    [("000001fffeffffff", True), ("000001ffffffffff", False), ("0000000001000000", False)],
)
def test_cap_sys_resource_is_read_from_the_bounding_set(bounding: str, lacks: bool) -> None:
    status = f"Name:\tx\nCapEff:\t0000000000000000\nCapBnd:\t{bounding}\n"
    assert dockerd.host_lacks_cap_sys_resource(status) is lacks


def test_dockerd_changes_no_firewall_forwarding_or_default_bridge() -> None:
    command = dockerd.dockerd_command(Path("/data"), None)
    for flag in ("--iptables=false", "--ip-forward=false", "--ip-masq=false", "--bridge=none"):
        assert flag in command
    assert f"--host=unix://{dockerd.SOCKET}" in command
    assert not any(arg.startswith("--default-runtime") for arg in command)
    wrapped = dockerd.dockerd_command(Path("/data"), Path("/w"))
    assert f"--default-runtime={dockerd.WRAPPER_NAME}" in wrapped


def test_local_node_image_config_pulls_nothing_and_brings_its_own_network() -> None:
    config = cluster_config("local/node:1", local_image=True, v1=True, restrict_oom=True)
    assert {node["image"] for node in config["nodes"]} == {"local/node:1"}
    assert config["networking"] == {"disableDefaultCNI": True}
    patches = config["kubeadmConfigPatches"]
    assert "kind: KubeletConfiguration\nfailCgroupV1: false\n" in patches
    assert f"kind: ClusterConfiguration\nimageRepository: {IMAGE_REPOSITORY}\n" in patches
    containerd = [tomllib.loads(p) for p in config["containerdConfigPatches"]]
    cri = [c["plugins"]["io.containerd.grpc.v1.cri"] for c in containerd]
    assert any(c.get("restrict_oom_score_adj") is True for c in cri)
    assert any(c.get("enable_cdi") is True for c in cri)


def test_stock_image_on_cgroup_v2_keeps_kinds_defaults() -> None:
    config = cluster_config("kindest/node:v1.36.1", local_image=False, v1=False, restrict_oom=False)
    assert "networking" not in config
    assert "kubeadmConfigPatches" not in config
    assert len(config["containerdConfigPatches"]) == 1


KIND_LIKE_CONTAINERD = """version = 2

[proxy_plugins]
[proxy_plugins."fuse-overlayfs"]
  type = "snapshot"
  address = "/run/containerd-fuse-overlayfs.sock"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:1"
  restrict_oom_score_adj = false
"""


def test_node_containerd_config_names_our_pause_and_restricts_oom_score_adj() -> None:
    pause = f"{IMAGE_REPOSITORY}/pause:3.10.2"
    config = tomllib.loads(containerd_config(KIND_LIKE_CONTAINERD, pause))
    assert "proxy_plugins" not in config
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == pause
    assert cri["restrict_oom_score_adj"] is True
    assert cri["containerd"]["snapshotter"] == "overlayfs"


def test_pod_network_is_ptp_on_the_nodes_pod_cidr() -> None:
    plugins = json.loads(conflist("10.244.1.0/24"))["plugins"]
    assert [p["type"] for p in plugins] == ["ptp", "portmap"]
    assert plugins[0]["ipMasq"] is False
    assert plugins[0]["ipam"]["ranges"] == [[{"subnet": "10.244.1.0/24"}]]


@pytest.mark.parametrize("part", ["webhook", "agent"])
def test_dockerfiles_take_their_bases_as_arguments_with_public_defaults(part: str) -> None:
    text = DOCKERFILES[part].read_text()
    assert "ARG BUILD_IMAGE=python:3.11-slim-bookworm" in text
    assert "ARG BASE_IMAGE=python:3.11-slim-bookworm" in text
    assert "FROM --platform=$BUILDPLATFORM ${BUILD_IMAGE} AS site" in text  # runs on the builder
    assert "FROM ${BASE_IMAGE}" in text  # the image itself: the target platform
    assert "ARG PIP_OPTIONS=" in text
    assert "$PIP_OPTIONS" in (REPO_ROOT / "images" / "site.sh").read_text()
    if part == "agent":
        assert "ARG GCC_IMAGE=gcc:14" in text
        assert "FROM --platform=$BUILDPLATFORM ${GCC_IMAGE} AS libvgpu" in text
    froms = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert all("${" in line for line in froms), froms


def requirements(go_mod: Path) -> dict[str, str]:
    found = {}
    for line in go_mod.read_text().splitlines():
        parts = line.strip().removeprefix("require ").split()
        if len(parts) >= 2 and parts[1].startswith("v") and "." in parts[0]:
            found[parts[0]] = parts[1]
    return found


def test_kind_k8s_tools_resolve_every_shared_module_as_the_cluster_does() -> None:
    """Same versions as e2e/cluster/gotools: Go's build cache then serves every common package."""
    cluster = requirements(REPO_ROOT / "e2e" / "cluster" / "gotools" / "go.mod")
    kind = requirements(GOTOOLS_DIR / "go.mod")
    shared = sorted(set(cluster) & set(kind))
    assert "k8s.io/kubernetes" in shared
    assert {m: kind[m] for m in shared} == {m: cluster[m] for m in shared}


def test_coredns_is_built_at_the_version_the_stamp_names() -> None:
    assert requirements(COREDNS_DIR / "go.mod")["github.com/coredns/coredns"] == COREDNS_VERSION
