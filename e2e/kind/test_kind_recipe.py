"""What can be checked of the kind e2e recipe without Docker (``make e2e``): the plain kind config
is plain and its labels name cards the agent accepts, the tier adds to it only what its offline
node image and this host need, ``hack/kind-e2e.sh`` and the shell suite pass shellcheck and say
what is missing, and the chart turns the script's install values into label-driven mock agents
with the stand-in CUDA driver. The recipe itself runs on kind in ``make e2e-kind``
(``recipe.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e.chart.rendering import Helm, containers, one
from e2e.kind.nodeimage import IMAGE_REPOSITORY
from e2e.kind.recipe import CONFIG, SCRIPT, SUITE, plain_config
from vgpu_bridge.node.mock_cards import parse_label

pytestmark = pytest.mark.e2e
SHELL_SCRIPTS = (SCRIPT, SUITE / "gpu-sharing.sh")
LABEL = "vgpu-bridge.io/mock-gpus"
#: the values `hack/kind-e2e.sh install` gives helm (besides image.tag and driverName)
INSTALL_SETS = (
    "image.registry=docker.io/library",
    "image.pullPolicy=IfNotPresent",
    "agent.mock.enabled=true",
)


def test_the_plain_kind_config_is_nodes_and_their_mock_gpu_labels_only() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    assert set(config) == {"kind", "apiVersion", "name", "nodes"}
    workers = [node for node in config["nodes"] if node["role"] == "worker"]
    assert len(workers) == 2
    for node in config["nodes"]:
        assert set(node) <= {"role", "labels"}, "no image, no patches: `--image` picks the image"
    for index, worker in enumerate(workers):
        value = worker["labels"][LABEL]
        cards = parse_label(value, node=f"worker-{index}", label=LABEL)
        assert len(cards) == int(value.split("x")[0])


@pytest.mark.parametrize("v1", [False, True], ids=["cgroup-v2", "cgroup-v1"])
@pytest.mark.parametrize("restrict_oom", [False, True], ids=["all-caps", "no-sys-resource"])
def test_the_tier_adds_only_what_its_offline_node_image_and_this_host_need(
    v1: bool, restrict_oom: bool
) -> None:
    plain = yaml.safe_load(CONFIG.read_text())
    config = plain_config(local_image=True, v1=v1, restrict_oom=restrict_oom)
    added = {key for key in config if key not in plain}
    assert {key: config[key] for key in plain} == plain
    assert config["networking"] == {"disableDefaultCNI": True}
    patches = config["kubeadmConfigPatches"]
    assert f"imageRepository: {IMAGE_REPOSITORY}" in patches[0]
    assert any("failCgroupV1: false" in patch for patch in patches) is v1
    assert ("containerdConfigPatches" in added) is restrict_oom
    assert added <= {"networking", "kubeadmConfigPatches", "containerdConfigPatches"}


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_the_shell_scripts_parse_and_pass_shellcheck(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def recipe(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {"PATH": os.environ["PATH"], "KIND": "true", "KUBECTL": "true", **env}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=environment, capture_output=True, text=True, timeout=30
    )


def test_the_script_without_a_command_prints_its_usage() -> None:
    done = recipe()
    assert done.returncode == 2
    assert "load|install|wait|all" in done.stderr


def test_images_from_docker_need_a_tag() -> None:
    done = recipe("--images", "docker", "load")
    assert done.returncode == 1
    assert "--images docker needs --tag" in done.stderr


def test_an_archive_directory_without_the_images_says_how_to_make_them(tmp_path: Path) -> None:
    done = recipe("--images", str(tmp_path), "--arch", "amd64", "load")
    assert done.returncode == 1
    assert f"no {tmp_path}/vgpu-bridge-webhook-*-amd64.tar" in done.stderr
    assert "make images ARCH=amd64" in done.stderr


def test_the_tag_comes_from_the_archives_and_two_versions_need_one(tmp_path: Path) -> None:
    for version in ("0.1.0", "0.2.0"):
        for part in ("webhook", "agent"):
            (tmp_path / f"vgpu-bridge-{part}-{version}-amd64.tar").touch()
    two = recipe("--images", str(tmp_path), "--arch", "amd64", "load")
    assert two.returncode == 1
    assert "give --tag" in two.stderr
    # one version named: past the images to the cluster (kind here is `true`: it lists none)
    named = recipe("--images", str(tmp_path), "--arch", "amd64", "--tag", "0.2.0-amd64", "load")
    assert named.returncode == 1
    assert "no kind cluster named kind" in named.stderr


def test_wait_names_the_label_when_no_node_has_it() -> None:
    done = recipe("--label", "example.com/cards", "wait")
    assert done.returncode == 1
    assert "no node has the label example.com/cards" in done.stderr


def test_the_chart_makes_label_driven_mock_agents_from_the_scripts_install_values(
    helm: Helm,
) -> None:
    script = SCRIPT.read_text()
    for setting in INSTALL_SETS:
        assert f"--set {setting}" in script
    assert '--set-string "agent.mock.nodeLabel=$LABEL"' in script
    values = {
        "image": {"registry": "docker.io/library", "tag": "kind", "pullPolicy": "IfNotPresent"},
        "agent": {"mock": {"enabled": True, "nodeLabel": LABEL}},
    }
    daemonset = one(helm.template(values), "DaemonSet")
    (agent,) = [c for c in containers(daemonset) if c["name"] == "agent"]
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["VGPU_BRIDGE_MOCK_GPUS_NODE_LABEL"] == LABEL
    assert env["VGPU_BRIDGE_MOCK_DRIVER"] == "/opt/vgpu-bridge/mock-driver"
    affinity = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": LABEL, "operator": "Exists"} in [e for t in terms for e in t["matchExpressions"]]
