"""The chart's pre-delete hook (templates/uninstall-hook.yaml): its account, RBAC and Job are helm
hooks of `pre-delete`, the RBAC made before the Job, all deleted once it succeeds; the RBAC is the
least `vgpu-bridge uninstall-notice` needs, and on the real API server it is enough; the Job runs
the webhook's image once, bounded in time, and its pod passes Pod Security `restricted`. Helm
cannot run the Job here (no kubelet): the kind tier runs it (e2e/kind/scenarios_day2.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.chart.cluster_api import Identity, allowed
from e2e.chart.policy_objects import applied
from e2e.chart.rendering import Helm, Json, containers, one
from e2e.chart.test_pod_security import create_pod_dry_run, label
from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster
from e2e.fake_driver import FakeGpuDriver
from e2e.test_uninstall_notice import notice_cli, notices, running_shares, token_kubeconfig
from e2e.waiting import wait_for
from vgpu_bridge.uninstall_notice import NoticeSettings

pytestmark = pytest.mark.e2e
HOOK_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job")


def hook_objects(objects: list[Json]) -> list[Json]:
    return [
        obj
        for obj in objects
        if (obj["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete"
    ]


def job(objects: list[Json]) -> Json:
    return one(hook_objects(objects), "Job")


def grants(role: Json) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_hooks_account_rbac_and_job_run_before_helm_deletes_and_go_once_done(
    helm: Helm,
) -> None:
    hooks = hook_objects(helm.template())
    assert sorted(obj["kind"] for obj in hooks) == sorted(HOOK_KINDS)
    weights = {}
    for obj in hooks:
        annotations = obj["metadata"]["annotations"]
        policy = annotations["helm.sh/hook-delete-policy"]
        assert policy == "before-hook-creation,hook-succeeded"
        weights[obj["kind"]] = int(annotations["helm.sh/hook-weight"])
    assert max(w for kind, w in weights.items() if kind != "Job") < weights["Job"]


def test_the_hook_may_list_claims_get_pods_and_post_events_and_nothing_more(helm: Helm) -> None:
    role = one(hook_objects(helm.template()), "ClusterRole")
    assert grants(role) == {
        ("resource.k8s.io", "resourceclaims", "list"),
        ("", "pods", "get"),
        ("events.k8s.io", "events", "create"),
    }


def test_the_job_runs_the_notice_once_within_a_deadline_past_its_wait(helm: Helm) -> None:
    objects = helm.template({"uninstallHook": {"waitSeconds": 90}})
    spec = job(objects)["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] > 90
    assert spec["ttlSecondsAfterFinished"] > 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    [notice] = containers(job(objects))
    [webhook] = containers(one(objects, "Deployment"))
    assert notice["image"] == webhook["image"]
    assert notice["args"] == ["uninstall-notice"]
    settings = NoticeSettings.from_env({e["name"]: e["value"] for e in notice["env"]})
    assert (settings.drivers, settings.wait_seconds) == ("gpu.vgpu-bridge.io", 90)
    account = one(hook_objects(objects), "ServiceAccount")["metadata"]["name"]
    assert pod["serviceAccountName"] == account
    [subject] = one(hook_objects(objects), "ClusterRoleBinding")["subjects"]
    assert subject["name"] == account


def test_under_nvidia_driver_the_notice_also_looks_at_the_enforcers_claims(helm: Helm) -> None:
    [notice] = containers(job(helm.template({"nvidiaDriver": {"enabled": True}})))
    env = {e["name"]: e["value"] for e in notice["env"]}
    assert NoticeSettings.from_env(env).drivers == "gpu.vgpu-bridge.io,enforcer.vgb.io"


@pytest.mark.parametrize(
    "values",
    [{"uninstallHook": {"enabled": False}}, {"agent": {"enabled": False}}],
    ids=["hook-off", "no-agents"],
)
def test_no_hook_when_turned_off_or_without_agents(helm: Helm, values: Json) -> None:
    assert hook_objects(helm.template(values)) == []


def test_the_hooks_pod_is_admitted_where_restricted_is_enforced(
    helm: Helm, kube: KubeClient, namespace: str
) -> None:
    label(kube, namespace, "restricted")
    assert create_pod_dry_run(kube, namespace, job(helm.template())) == ""


def test_the_hooks_rbac_is_enough_for_the_notice_on_the_real_api_server(
    helm: Helm, kube: KubeClient, e2e_cluster: LocalCluster, namespace: str,
    fake_gpu_driver: FakeGpuDriver, kubelet_standin: KubeletStandIn, tmp_path: Path,
) -> None:  # fmt: skip
    running_shares(kube, namespace, fake_gpu_driver, ["running"])
    objects = hook_objects(helm.template(release="vb-hook", namespace=namespace))
    rbac = [obj for obj in objects if obj["kind"] != "Job"]
    with applied(kube, rbac):
        account = one(rbac, "ServiceAccount")["metadata"]["name"]
        identity = Identity.service_account(namespace, account)
        wait_for(  # a binding reaches the authorizer's cache a moment after it is made
            lambda: all(allowed(kube, identity, verb=v, group=g, resource=r)
                        for g, r, v in grants(one(rbac, "ClusterRole"))),
            what="the hook's RBAC in force",
        )  # fmt: skip
        kubeconfig = token_kubeconfig(kube, e2e_cluster, namespace, account,
                                      tmp_path / "kubeconfig")  # fmt: skip
        done = notice_cli(kubeconfig, "--drivers", fake_gpu_driver.name, "--wait-seconds", "0")
    assert done.returncode == 0, done.stderr
    assert [e["regarding"]["name"] for e in notices(kube, namespace)] == ["running"]
