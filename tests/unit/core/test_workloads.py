"""Where each workload kind keeps its pod templates, and how errors name an object."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.core.workloads import object_ref, pod_templates


@pytest.mark.parametrize(
    ("api_version", "kind", "pointer"),
    [
        ("v1", "Pod", "/spec"),
        ("apps/v1", "Deployment", "/spec/template/spec"),
        ("apps/v1", "StatefulSet", "/spec/template/spec"),
        ("apps/v1", "DaemonSet", "/spec/template/spec"),
        ("apps/v1", "ReplicaSet", "/spec/template/spec"),
        ("v1", "ReplicationController", "/spec/template/spec"),
        ("batch/v1", "Job", "/spec/template/spec"),
        ("batch/v1", "CronJob", "/spec/jobTemplate/spec/template/spec"),
        ("batch.volcano.sh/v1alpha1", "Job", "/spec/tasks/0/template/spec"),
    ],
)
def test_pod_templates_are_found_in_every_workload_kind(
    api_version: str, kind: str, pointer: str
) -> None:
    template: dict[str, Any] = {"metadata": {}, "spec": {"containers": []}}
    spec: dict[str, Any] = {"template": template}
    if kind == "CronJob":
        spec = {"jobTemplate": {"spec": {"template": template}}}
    if api_version.startswith("batch.volcano.sh"):
        spec = {"tasks": [{"template": template}]}
    obj = {
        "apiVersion": api_version,
        "kind": kind,
        "spec": template["spec"] if kind == "Pod" else spec,
    }
    assert [t.spec_pointer for t in pod_templates(obj)] == [pointer]


def test_batch_job_is_not_mistaken_for_a_volcano_job() -> None:
    obj = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"tasks": [{"template": {"spec": {}}}]}}
    assert pod_templates(obj) == []


def test_object_ref_names_generate_name_objects() -> None:
    obj = {"kind": "Pod", "metadata": {"generateName": "web-", "namespace": "a"}}
    assert object_ref(obj) == "Pod/a/web-*"
