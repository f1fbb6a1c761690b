"""What can be checked of Volcano on kind without Docker: the images' Dockerfile, the RBAC taken
from Volcano's own manifest in its module, the Deployments and the scheduler configuration that
``volcano.py`` writes, the chart values that turn on the webhook's Volcano rules, and the
Makefile collecting the scenario file."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from e2e.chart.rendering import Helm
from e2e.cluster.settings import REPO_ROOT
from e2e.kind import volcano
from e2e.kind.cluster import KIND_DIR, VALUES
from e2e.kind.scenarios_volcano import EXAMPLE, SHARE
from e2e.kind.steps import StepError
from e2e.volcano.build import VolcanoBuild, pinned_version
from e2e.volcano.components import SCHEDULER_CONF

pytestmark = pytest.mark.e2e
Json = dict[str, object]


@pytest.fixture(scope="module")
def all_in_one() -> str:
    """Volcano's all-in-one manifest from the module the Volcano tier builds."""
    return (VolcanoBuild.from_env().module_dir() / volcano.ALL_IN_ONE).read_text()


def test_each_component_has_its_own_image_stage_running_the_multi_call_binary() -> None:
    text = volcano.DOCKERFILE.read_text()
    assert re.search(r"^ARG BASE_IMAGE=\S+$", text, re.MULTILINE)
    for component in volcano.COMPONENTS:
        stage = text.split(f" AS {component}\n")[1].split("\nFROM ")[0]
        entrypoint = f'ENTRYPOINT ["/usr/local/bin/vgpu-volcano", "{component}"]'
        assert entrypoint in stage
    assert "COPY vgpu-volcano /usr/local/bin/vgpu-volcano" in text


def test_rbac_is_volcanos_own_for_the_scheduler_and_the_controllers(all_in_one: str) -> None:
    documents = volcano.upstream_rbac(all_in_one)
    assert (documents[0]["kind"], documents[0]["metadata"]["name"]) == (
        "Namespace",
        volcano.NAMESPACE,
    )
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in documents[1:])
    assert [k for k, _ in kinds] == sorted(list(volcano.RBAC_KINDS) * 2)
    (scheduler_role,) = [
        d
        for d in documents
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "volcano-scheduler"
    ]
    dra = [r for r in scheduler_role["rules"] if "resource.k8s.io" in r["apiGroups"]]
    # Kubernetes 1.36 asks a scheduler that allocates claims for the binding subresource
    assert any("resourceclaims/binding" in r["resources"] for r in dra), dra


def test_missing_rbac_is_named(all_in_one: str) -> None:
    documents = [
        d
        for d in yaml.safe_load_all(all_in_one)
        if d
        and not (d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "volcano-scheduler")
    ]
    with pytest.raises(StepError, match="lacks ClusterRoleBinding volcano-scheduler"):
        volcano.upstream_rbac(yaml.safe_dump_all(documents))


def test_each_deployment_runs_its_component_under_its_volcano_account() -> None:
    for component in volcano.COMPONENTS:
        deployment = volcano.deployment(component, "v9.9.9")
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == volcano.ACCOUNTS[component]
        (container,) = pod["containers"]
        assert container["image"] == volcano.image(component, "v9.9.9")
        assert container["imagePullPolicy"] == "Never"  # loaded with kind load, never pulled
        assert f"--healthz-address=:{volcano.HEALTHZ_PORT}" in container["args"]
        assert container["readinessProbe"]["httpGet"]["port"] == volcano.HEALTHZ_PORT
        assert "--leader-elect=false" in container["args"]  # one replica
        assert container["securityContext"]["runAsNonRoot"] is True


def test_vc_scheduler_reads_the_volcano_tiers_configuration_from_its_config_map() -> None:
    config = volcano.scheduler_config()
    assert config["data"] == {volcano.CONFIG_FILE: SCHEDULER_CONF}
    pod = volcano.deployment("scheduler", "v1")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    conf_flag = f"--scheduler-conf={mount['mountPath']}/{volcano.CONFIG_FILE}"
    assert conf_flag in container["args"]
    assert "--feature-gates=DRAConsumableCapacity=true" in container["args"]
    assert "- name: capacity" in SCHEDULER_CONF  # the queue plugin that counts claims


def test_kind_values_turn_on_the_webhooks_volcano_rules_for_the_release_built(
    helm: Helm,
) -> None:
    values = yaml.safe_load(VALUES.read_text())
    assert values["volcano"] == {"enabled": True, "version": pinned_version()}
    objects = helm.template(values)
    hooks = [
        h for o in objects if o["kind"] == "MutatingWebhookConfiguration" for h in o["webhooks"]
    ]
    groups = {g for h in hooks for rule in h["rules"] for g in rule["apiGroups"]}
    assert {"batch.volcano.sh", "scheduling.volcano.sh"} <= groups


def test_the_scenario_applies_the_volcano_example_as_its_readme_describes_it() -> None:
    job = yaml.safe_load((REPO_ROOT / "examples" / EXAMPLE).read_text())
    assert job["spec"]["schedulerName"] == "volcano"
    (task,) = job["spec"]["tasks"]
    (container,) = task["template"]["spec"]["containers"]
    limits = container["resources"]["limits"]
    assert limits["volcano.sh/vgpu-memory"] == SHARE["memory_mib"]
    assert limits["volcano.sh/vgpu-cores"] == SHARE["cores"]


def test_make_e2e_kind_collects_every_scenario_file() -> None:
    done = subprocess.run(
        ["make", "--dry-run", "--always-make", "e2e-kind"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    pytest_line = next(line for line in done.stdout.splitlines() if "pytest e2e/kind" in line)
    collected = re.findall(r"e2e/kind/scenarios\w*\.py", pytest_line)
    on_disk = sorted(str(p.relative_to(REPO_ROOT)) for p in KIND_DIR.glob("scenarios*.py"))
    assert sorted(collected) == on_disk
    assert collected[0] == "e2e/kind/scenarios.py"  # the others install the chart it uninstalls
