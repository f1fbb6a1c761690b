"""The Kubernetes releases `make test` runs the e2e DRA scenarios on (docs/kubernetes-versions.md).

Offline: the Makefile builds both releases' binaries (`cluster-bin`) and `make test` runs the DRA
scenario files again on the current release (`e2e-k8s137`). On a cluster: the control plane a
session started is the release it was asked for, and its fake nodes report that release, as a
kubelet of it would; this file is one of the `e2e-k8s137` files, so that run proves it ran 1.37.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from e2e.cluster import KubeClient, Settings
from e2e.cluster.nodes import STANDIN_SUFFIX
from e2e.cluster.settings import (
    CURRENT_K8S_VERSION,
    DEFAULT_K8S_VERSION,
    REPO_ROOT,
    TESTED_K8S_VERSIONS,
)

#: One scenario file per part the issue names: webhook translation against the real API server,
#: kube-scheduler packing consumable-capacity shares, the node agent's Prepare over its socket.
REQUIRED_SCENARIOS = (
    "e2e/webhook/test_admission.py",
    "e2e/test_dra_sharing.py",
    "e2e/test_core_booking.py",
    "e2e/node/test_agent.py",
    "e2e/test_extended_resource.py",  # whole GPUs through DeviceClass extendedResourceName (1.37)
)


def _dry_run(target: str) -> list[str]:
    """The commands `make <target>` would run (recursive makes dry-run as well)."""
    done = subprocess.run(
        ["make", "--dry-run", "--always-make", "--no-print-directory", target],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def test_the_tested_releases_are_the_pinned_one_and_the_current_one() -> None:
    assert TESTED_K8S_VERSIONS == (DEFAULT_K8S_VERSION, CURRENT_K8S_VERSION)
    current = Settings.from_env({"HOME": "/home/x", "K8S_VERSION": CURRENT_K8S_VERSION})
    assert current.minor == "1.37"
    assert current.binary.parts[-3:] == (f"k8s-{CURRENT_K8S_VERSION}", "bin", "vgpu-k8s")
    pinned = Settings.from_env({"HOME": "/home/x"})
    assert pinned.binary != current.binary  # each release keeps its own binary and stamp


def test_make_cluster_bin_builds_every_tested_release() -> None:
    builds = [line for line in _dry_run("cluster-bin") if "-m e2e.cluster build" in line]
    assert len(builds) == 2
    assert not builds[0].startswith("K8S_VERSION=")  # the pinned one, or K8S_VERSION's
    assert builds[1].startswith(f"K8S_VERSION={CURRENT_K8S_VERSION} ")


def test_make_e2e_k8s137_runs_the_dra_scenarios_on_the_current_release() -> None:
    runs = [line for line in _dry_run("e2e-k8s137") if "-m pytest" in line]
    assert len(runs) == 1
    assert runs[0].startswith(f"K8S_VERSION={CURRENT_K8S_VERSION} ")
    files = re.findall(r"e2e/\S+\.py", runs[0])
    assert set(REQUIRED_SCENARIOS) <= set(files)
    assert "e2e/test_k8s_versions.py" in files  # the check below runs on that cluster too
    assert all((REPO_ROOT / name).is_file() for name in files)


def test_make_test_runs_the_current_release_after_the_whole_tier() -> None:
    """The current release's control plane is built beside the first tiers (`make -j2`), then
    the later tiers' Go programs, and its scenarios run after the whole e2e tier."""
    lines = [line.strip().split() for line in _dry_run("test")]
    makes = [words[1:] for words in lines if words and re.fullmatch(r"\S*make", words[0])]
    targets = [word for words in makes for word in words if not word.startswith("-")]
    assert ["-j2", "test-first-tiers", "later-tier-builds"] in makes
    builds = [line.strip() for line in _dry_run("later-tier-builds")]
    first = builds.index(f"K8S_VERSION={CURRENT_K8S_VERSION} .venv/bin/python -m e2e.cluster build")
    assert first < builds.index(".venv/bin/python -m e2e.realnode build")
    assert first < builds.index(".venv/bin/python -m e2e.kind build")
    assert "e2e" in targets
    assert "e2e-k8s137" in targets
    assert targets.index("e2e") < targets.index("e2e-k8s137")


def test_the_versions_page_names_every_tested_release_and_the_charts_value() -> None:
    page = (REPO_ROOT / "docs" / "kubernetes-versions.md").read_text()
    for version in TESTED_K8S_VERSIONS:
        assert version in page
    assert "kubernetes.allowGatedConsumableCapacity" in page
    assert "DRAConsumableCapacity=true" in page
    assert "deviceClass.extendedResourceName" in page


@pytest.mark.e2e
def test_the_cluster_and_its_nodes_are_the_release_under_test(
    kube: KubeClient, fake_nodes: list[str], e2e_settings: Settings
) -> None:
    assert kube.get("/version")["gitVersion"] == e2e_settings.k8s_version
    for name in fake_nodes:
        node_info = kube.get(f"/api/v1/nodes/{name}")["status"]["nodeInfo"]
        assert node_info["kubeletVersion"] == e2e_settings.k8s_version + STANDIN_SUFFIX
