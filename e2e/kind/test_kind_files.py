"""What can be checked of the kind path without Docker: the kind config enables what DRA with
consumable capacity and CDI need, the images carry what the chart expects where it expects it,
and the kind values pass the chart's schema."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from e2e.chart.rendering import CHART, KUBE_VERSION, Helm, containers, one
from e2e.cluster.settings import REPO_ROOT
from e2e.kind.cluster import CONFIG, GPU_NODE_LABEL, GPU_TAINT, IMAGES, VALUES
from e2e.kind.scenarios_migration import MIGRATION_VALUES, POOL_LABEL, PROBE, WORKLOAD

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
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module = scripts["vgpu-bridge"].removesuffix(":main")  # the module runs main() as __main__
    assert f'ENTRYPOINT ["python3", "-P", "-m", "{module}"]' in text
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
    assert webhook["image"] == "docker.io/library/vgpu-bridge-webhook:kind"
    daemonset = one(objects, "DaemonSet")
    assert {c["image"] for c in containers(daemonset)} == {
        "docker.io/library/vgpu-bridge-agent:kind"
    }
    spec = daemonset["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec  # the chart's default GPU-node affinity places the agent
    (term,) = [
        term
        for term in spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        if term["matchExpressions"][0]["key"] == GPU_NODE_LABEL.split("=")[0]
    ]
    assert term["matchExpressions"][0]["values"] == ["true"]


def test_kind_nodes_are_a_mixed_pool_with_a_tainted_gpu_worker_and_a_cpu_worker() -> None:
    nodes = kind_config()["nodes"]
    assert isinstance(nodes, list)
    workers = [n for n in nodes if n["role"] == "worker"]
    key, value = GPU_NODE_LABEL.split("=")
    gpu = [n for n in workers if (n.get("labels") or {}).get(key) == value]
    cpu = [n for n in workers if n not in gpu]
    assert len(gpu) == 2
    assert len(cpu) == 1
    tainted = [
        yaml.safe_load(p)["nodeRegistration"]["taints"] for p in gpu[1]["kubeadmConfigPatches"]
    ]
    assert tainted == [[GPU_TAINT]]
    assert "kubeadmConfigPatches" not in gpu[0]
    assert "kubeadmConfigPatches" not in cpu[0]


def test_kind_api_server_runs_the_extended_resource_toleration_plugin() -> None:
    patches = kind_config()["kubeadmConfigPatchesJSON6902"]
    assert isinstance(patches, list)
    (patch,) = patches
    (op,) = yaml.safe_load(patch["patch"])
    assert op["path"] == "/apiServer/extraArgs/-"
    assert op["value"]["name"] == "enable-admission-plugins"
    assert op["value"]["value"].split(",") == ["NodeRestriction", "ExtendedResourceToleration"]


def test_scenarios_use_examples_that_exist() -> None:
    scenarios = (Path(__file__).parent / "scenarios.py").read_text()
    used = re.findall(r'example\("([^"]+)"\)', scenarios)
    assert used
    for path in used:
        assert (REPO_ROOT / "examples" / path).is_file(), path


def test_migration_values_keep_legacy_namespaces_from_every_webhook_and_our_agent_on_dra_nodes(
    helm: Helm,
) -> None:
    """What the migration scenario installs (the kind values, then examples/migration's), as
    docs/migration.md tells users to: helm template with both files, in that order."""
    out = helm.run(
        "template", "vgpu-bridge", str(CHART), "--namespace", "vgpu-bridge",
        "--kube-version", KUBE_VERSION, "--values", str(VALUES), "--values", str(MIGRATION_VALUES),
    )  # fmt: skip
    objects = [doc for doc in yaml.safe_load_all(out) if doc]
    hooks = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    legacy = {"key": POOL_LABEL, "operator": "NotIn", "values": ["legacy"]}
    assert hooks
    for hook in hooks:
        assert legacy in hook["namespaceSelector"]["matchExpressions"], hook["name"]
    spec = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {POOL_LABEL: "dra"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = [t["matchExpressions"][0]["key"] for t in terms["nodeSelectorTerms"]]
    assert GPU_NODE_LABEL.split("=")[0] in keys  # the GPU-node affinity still holds too


def test_the_migration_scenario_applies_examples_that_exist() -> None:
    for path in (MIGRATION_VALUES, WORKLOAD, PROBE):
        assert path.is_file(), path
    workload = yaml.safe_load(WORKLOAD.read_text())
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" in container["resources"]["limits"]
    assert "namespace" not in workload["metadata"]  # one text, applied to both namespaces
