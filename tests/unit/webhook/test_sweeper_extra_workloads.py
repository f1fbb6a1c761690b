"""Issue 25 item 6: templates only a custom workload names (a JobSet, a RayCluster...) are kept.
The sweeper against a real `KubeApi` and the recording loopback API server."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.test_template_lifecycle import (
    DELETED,
    GRACE_S,
    NAMESPACE,
    NOW,
    name_of,
    ours,
    serve_templates,
    stored,
    writes,
)
from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.webhook.extra_workloads import (
    DEFAULT_EXTRA_WORKLOAD_RESOURCES,
    ExtraResource,
    TooLarge,
    parse_extra_resources,
    template_names_anywhere,
)
from vgpu_bridge.webhook.settings import Settings
from vgpu_bridge.webhook.templates import Sweeper, templates_path

TLS = {"VGPU_BRIDGE_TLS_CERT_FILE": "/tls/crt", "VGPU_BRIDGE_TLS_KEY_FILE": "/tls/key"}
JOBSETS = ExtraResource("jobsets", "jobset.x-k8s.io", "v1alpha2")
RAY = ExtraResource("rayclusters", "ray.io", "v1")


def sweeper(recorded: RecordingApi, *extra: ExtraResource) -> Sweeper:
    return Sweeper(recorded.api, grace_s=GRACE_S, clock=lambda: NOW, extra=extra)


def jobset(template: dict[str, Any]) -> dict[str, Any]:
    """A JobSet as listed: its pod template three levels below where core would look."""
    claim = {"name": "gpu", "resourceClaimTemplateName": name_of(template)}
    pod = {"spec": {"containers": [], "resourceClaims": [claim]}}
    job = {"name": "workers", "template": {"spec": {"template": pod}}}
    return {
        "metadata": {"name": "train", "namespace": NAMESPACE},
        "spec": {"replicatedJobs": [job]},
    }


def test_a_template_only_a_custom_workload_names_is_kept_and_the_unnamed_one_deleted(
    recorded: RecordingApi,
) -> None:
    used, unused = ours("1Gi"), ours("2Gi")
    serve_templates(recorded, *(stored(t, created_ago=7200) for t in (used, unused)))
    recorded.answer("GET", JOBSETS.list_path(NAMESPACE), 200, {"items": [jobset(used)]})
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(unused)), 200, DELETED)
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(used)), 200, DELETED)
    # RAY is not installed: the loopback server answers its list 404, which names nothing
    assert sweeper(recorded, JOBSETS, RAY).sweep_once() == [f"{NAMESPACE}/{name_of(unused)}"]
    assert writes(recorded) == [("DELETE", templates_path(NAMESPACE, name_of(unused)))]
    asked = {c.path for c in recorded.calls if c.method == "GET"}
    assert {JOBSETS.list_path(NAMESPACE), RAY.list_path(NAMESPACE)} <= asked
    assert JOBSETS.list_path(NAMESPACE) == (
        f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets"
    )


def test_a_custom_workload_the_sweeper_may_not_list_keeps_every_template_of_its_namespace(
    recorded: RecordingApi,
) -> None:
    serve_templates(recorded, stored(ours("1Gi"), created_ago=7200))
    recorded.answer("GET", RAY.list_path(NAMESPACE), 403, {"code": 403})
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(ours("1Gi"))), 200, DELETED)
    sweeping = sweeper(recorded, RAY)
    assert sweeping.sweep_once() == []
    assert sweeping.sweep_once() == []  # and again, without raising: RBAC is not fixed by retry
    assert writes(recorded) == []
    assert sweeping.left_behind == 0


def test_a_custom_workload_past_the_walks_bounds_keeps_every_template_of_its_namespace(
    recorded: RecordingApi,
) -> None:
    deep: dict[str, Any] = {"resourceClaimTemplateName": "elsewhere"}
    for _ in range(200):
        deep = {"d": deep}
    serve_templates(recorded, stored(ours("1Gi"), created_ago=7200))
    recorded.answer("GET", JOBSETS.list_path(NAMESPACE), 200, {"items": [{"spec": deep}]})
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(ours("1Gi"))), 200, DELETED)
    assert sweeper(recorded, JOBSETS).sweep_once() == []
    assert writes(recorded) == []


def test_the_walk_finds_names_at_any_depth_and_only_strings() -> None:
    obj = {"a": [{"resourceClaimTemplateName": "one"}, [{"b": {"resourceClaimTemplateName": 7}}]],
           "c": {"resourceClaimTemplateName": "two"}, "resourceClaimTemplateName": ""}  # fmt: skip
    assert template_names_anywhere([obj]) == {"one", "two"}


def test_the_walk_is_bounded_in_depth_and_in_nodes() -> None:
    chain: dict[str, Any] = {}
    for _ in range(10):
        chain = {"x": chain}
    assert template_names_anywhere([chain], max_depth=10) == set()
    with pytest.raises(TooLarge, match="deeper than 9"):
        template_names_anywhere([chain], max_depth=9)
    wide = {"items": [{"i": n} for n in range(50)]}
    assert template_names_anywhere([wide], max_nodes=52) == set()
    with pytest.raises(TooLarge, match="more than 51 nodes"):
        template_names_anywhere([wide], max_nodes=51)
    # far deeper than Python's recursion limit: the walk is iterative
    very_deep: list[Any] = []
    for _ in range(5000):
        very_deep = [very_deep]
    with pytest.raises(TooLarge):
        template_names_anywhere([very_deep])


def test_the_default_list_covers_the_common_kinds_and_reaches_the_sweeper() -> None:
    settings = Settings.from_env(TLS)
    resources = {str(r) for r in settings.extra_workloads()}
    assert resources == {
        "jobsets.jobset.x-k8s.io/v1alpha2",
        "leaderworkersets.leaderworkerset.x-k8s.io/v1",
        "pytorchjobs.kubeflow.org/v1",
        "tfjobs.kubeflow.org/v1",
        "mpijobs.kubeflow.org/v1",
        "rayclusters.ray.io/v1",
        "rayjobs.ray.io/v1",
        "rayservices.ray.io/v1",
        "workflows.argoproj.io/v1alpha1",
        "cronworkflows.argoproj.io/v1alpha1",
    }
    assert parse_extra_resources(DEFAULT_EXTRA_WORKLOAD_RESOURCES) == settings.extra_workloads()


def test_operators_add_kinds_or_turn_the_list_off() -> None:
    env = {**TLS, "VGPU_BRIDGE_EXTRA_WORKLOAD_RESOURCES": " widgets.example.com/v1beta1 ,,"}
    assert Settings.from_env(env).extra_workloads() == (
        ExtraResource("widgets", "example.com", "v1beta1"),
    )
    assert (
        Settings.from_env({**TLS, "VGPU_BRIDGE_EXTRA_WORKLOAD_RESOURCES": ""}).extra_workloads()
        == ()
    )


@pytest.mark.parametrize(
    "value",
    [
        "jobsets",  # no group or version
        "jobsets.jobset.x-k8s.io",  # no version
        "JobSets.jobset.x-k8s.io/v1",  # upper case
        "deployments.apps/v1",  # a group without a dot: built in, or a typo
        "jobsets.jobset.x-k8s.io/v1/extra",
        "jobsets.jobset.x-k8s.io/v1,pods/v1",  # one bad item spoils the list
    ],
)
def test_a_bad_resource_is_refused_naming_the_flag(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**TLS, "VGPU_BRIDGE_EXTRA_WORKLOAD_RESOURCES": value}
    with pytest.raises(SettingsError, match=r"extra_workload_resources: .*<resource>\.<group>"):
        Settings.from_env(env)
    parser = argparse.ArgumentParser()
    Settings.add_arguments(parser)
    args = parser.parse_args(["--extra-workload-resources", value])
    assert Settings.from_namespace_or_report(args, TLS) is None
    assert "--extra-workload-resources" in capsys.readouterr().err
