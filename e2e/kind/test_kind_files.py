"""What can be checked of the kind path without Docker: the kind config enables what DRA with
consumable capacity and CDI need, the images carry what the chart expects where it expects it,
and the kind values pass the chart's schema."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from e2e.chart.rendering import Helm, containers, one
from e2e.cluster.settings import REPO_ROOT
from e2e.kind.cluster import CONFIG, IMAGES, MOCK_GPU_LABEL, VALUES

pytestmark = pytest.mark.e2e
NODE_IMAGE = re.compile(r"^kindest/node:v1\.(\d+)\.(\d+)(@sha256:[0-9a-f]{64})?$")


def kind_config() -> dict[str, object]:
    config: dict[str, object] = yaml.safe_load(CONFIG.read_text())
    return config


def test_kind_config_enables_consumable_capacity_on_every_component() -> None:
    config = kind_config()
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert config["featureGates"] == {"DRAConsumableCapacity": True}


def test_kind_nodes_run_kubernetes_1_36_or_later() -> None:
    nodes = kind_config()["nodes"]
    assert isinstance(nodes, list)
    assert [n["role"] for n in nodes].count("worker") >= 1
    for node in nodes:
        match = NODE_IMAGE.match(node["image"])
        assert match is not None, node["image"]
        assert int(match.group(1)) >= 36


def test_containerd_applies_cdi_specs_from_the_agents_dir() -> None:
    patches = kind_config()["containerdConfigPatches"]
    assert isinstance(patches, list)
    cri = tomllib.loads(patches[0])["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True
    assert "/var/run/cdi" in cri["cdi_spec_dirs"]


def dockerfile(part: str) -> str:
    return IMAGES[part].read_text()


@pytest.mark.parametrize("part", ["webhook", "agent"])
def test_images_run_our_binary_with_the_subcommand_the_chart_passes(helm: Helm, part: str) -> None:
    text = dockerfile(part)
    assert 'ENTRYPOINT ["vgpu-bridge"]' in text
    assert f'CMD ["{"node" if part == "agent" else part}"]' in text
    for source in re.findall(r"^COPY (?!--from)(\S+)", text, re.MULTILINE):
        assert (REPO_ROOT / source).exists(), f"{IMAGES[part].name}: COPY {source}: not in the repo"


def test_agent_image_puts_libvgpu_where_the_init_container_copies_it_from(helm: Helm) -> None:
    daemonset = one(helm.template(), "DaemonSet")
    install = next(c for c in containers(daemonset) if c["name"] == "install-libvgpu")
    source = next(v["value"] for v in install["env"] if v["name"] == "VGPU_BRIDGE_LIBVGPU_SOURCE")
    copied = re.search(r"^COPY --from=libvgpu \S+/libvgpu\.so (\S+)$", dockerfile("agent"), re.M)
    assert copied is not None
    assert copied.group(1) == source


def test_kind_values_pass_the_schema_and_name_the_images_up_builds(helm: Helm) -> None:
    values = yaml.safe_load(VALUES.read_text())
    objects = helm.template(values)
    (webhook,) = containers(one(objects, "Deployment"))
    assert webhook["image"] == "vgpu-bridge-webhook:kind"
    daemonset = one(objects, "DaemonSet")
    assert {c["image"] for c in containers(daemonset)} == {"vgpu-bridge-agent:kind"}
    key, value = MOCK_GPU_LABEL.split("=")
    assert daemonset["spec"]["template"]["spec"]["nodeSelector"] == {key: value}


def test_scenarios_use_examples_that_exist() -> None:
    scenarios = (Path(__file__).parent / "scenarios.py").read_text()
    used = re.findall(r'example\("([^"]+)"\)', scenarios)
    assert used
    for path in used:
        assert (REPO_ROOT / "examples" / path).is_file(), path
