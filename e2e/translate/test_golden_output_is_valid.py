"""Everything `vgpu-bridge translate` prints in the golden cases is accepted by the real API
server (server-side dry run): the claim templates, with their capacity requests, CEL selectors,
firstAvailable alternatives and constraints, and the translated workloads that reference them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from e2e.cluster import KubeClient
from e2e.cluster.client import Json

pytestmark = pytest.mark.e2e
GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "data" / "translate"
PLURALS = {
    ("v1", "Pod"): "/api/v1/namespaces/{ns}/pods",
    ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
    ("v1", "PersistentVolumeClaim"): "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    ("v1", "ConfigMap"): "/api/v1/namespaces/{ns}/configmaps",
    ("v1", "PodTemplate"): "/api/v1/namespaces/{ns}/podtemplates",
    ("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments",
    ("apps/v1", "StatefulSet"): "/apis/apps/v1/namespaces/{ns}/statefulsets",
    ("apps/v1", "DaemonSet"): "/apis/apps/v1/namespaces/{ns}/daemonsets",
    ("apps/v1", "ReplicaSet"): "/apis/apps/v1/namespaces/{ns}/replicasets",
    ("batch/v1", "Job"): "/apis/batch/v1/namespaces/{ns}/jobs",
    ("batch/v1", "CronJob"): "/apis/batch/v1/namespaces/{ns}/cronjobs",
    ("resource.k8s.io/v1", "ResourceClaimTemplate"): (
        "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates"
    ),
}
VOLCANO_JOB = ("batch.volcano.sh/v1alpha1", "Job")  # served only where Volcano is installed


VOLCANO_PODGROUP = ("scheduling.volcano.sh/v1beta1", "PodGroup")  # only with Volcano's CRDs


def as_served_here(obj: Json) -> list[Json]:
    """A Volcano Job's task templates become core PodTemplates, which this API server checks;
    PodGroups carry no pod template and are checked where Volcano's CRDs are installed."""
    if (obj["apiVersion"], obj["kind"]) == VOLCANO_PODGROUP:
        return []
    if (obj["apiVersion"], obj["kind"]) != VOLCANO_JOB:
        return [obj]
    return [
        {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"{obj['metadata']['name']}-task-{index}"},
            "template": task["template"],
        }
        for index, task in enumerate(obj["spec"]["tasks"])
    ]


def golden_objects() -> list[tuple[str, Json]]:
    found = []
    for out in sorted(GOLDEN.glob("*/out.yaml")):
        text = out.read_text()
        docs = (
            yaml.safe_load(text)["items"]
            if text.lstrip().startswith("{")
            else yaml.safe_load_all(text)
        )
        objects = [o for d in docs if d for o in as_served_here(d)]
        found += [(f"{out.parent.name}:{o['kind']}/{o['metadata']['name']}", o) for o in objects]
    assert found, f"no golden output under {GOLDEN}"
    return found


OBJECTS = golden_objects()


@pytest.mark.parametrize("obj", [o for _, o in OBJECTS], ids=[name for name, _ in OBJECTS])
def test_golden_output_is_accepted_by_the_api_server(
    kube: KubeClient, namespace: str, obj: Json
) -> None:
    key = (obj["apiVersion"], obj["kind"])
    body = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    kube.request("POST", PLURALS[key].format(ns=namespace), body=body, query={"dryRun": "All"})
