"""What the sweeper leaves behind (`vgpu_bridge_templates_left_behind`, the alert
VgpuBridgeTemplatesLeftAfterSweepGrace): nothing after a pass that kept or deleted every template
past the grace; every template it had not settled when a pass fails."""

from __future__ import annotations

import pytest

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.test_template_lifecycle import (
    DELETED,
    NAMESPACE,
    name_of,
    ours,
    serve_templates,
    stored,
    sweeper,
)
from vgpu_bridge.kube import KubeError
from vgpu_bridge.webhook.metrics import WebhookMetrics
from vgpu_bridge.webhook.templates import templates_path


def test_a_pass_that_settles_every_old_template_leaves_none_behind(
    recorded: RecordingApi,
) -> None:
    deleted, raced, young = ours("1Gi"), ours("2Gi"), ours("3Gi")
    serve_templates(
        recorded,
        stored(deleted, created_ago=7200),
        stored(raced, created_ago=7200),
        stored(young, created_ago=1),
    )
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(deleted)), 200, DELETED)
    recorded.answer("DELETE", templates_path(NAMESPACE, name_of(raced)), 409, {"code": 409})
    sweeping = sweeper(recorded)
    sweeping.sweep_once()
    assert sweeping.left_behind == 0


def test_a_pass_whose_delete_is_forbidden_leaves_its_old_templates_behind(
    recorded: RecordingApi,
) -> None:
    first, second = ours("1Gi"), ours("2Gi")
    serve_templates(recorded, *(stored(t, created_ago=7200) for t in (first, second)))
    for template in (first, second):
        path = templates_path(NAMESPACE, name_of(template))
        recorded.answer("DELETE", path, 403, {"code": 403})
    sweeping = sweeper(recorded)
    metrics = WebhookMetrics()
    metrics.templates_left_behind.set_function(lambda: sweeping.left_behind)
    with pytest.raises(KubeError, match="HTTP 403"):
        sweeping.sweep_once()
    assert sweeping.left_behind == 2
    assert metrics.registry.get_sample_value("vgpu_bridge_templates_left_behind") == 2
