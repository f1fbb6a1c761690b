"""The template store, the sweeper, the slice publisher and the node state build their API paths
with `api_path`: a name stays one quoted segment whatever it holds, and valid names give the
paths they always gave."""

from __future__ import annotations

import pytest

from tests.unit.node.claims import GPUS
from tests.unit.recording_api import recording_api
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import LIST_PAGE_SIZE, KubeError
from vgpu_bridge.node.publisher import PublishError, SlicePublisher
from vgpu_bridge.node.state import ClaimRef
from vgpu_bridge.webhook.templates import Sweeper, TemplateStore

TEAM_A = "/apis/resource.k8s.io/v1/namespaces/team-a"


def test_a_template_name_is_one_quoted_segment_of_its_path() -> None:
    template = {"metadata": {"name": "odd%2Fname"}, "spec": {}}
    with recording_api() as recording:
        store = TemplateStore(recording.api, grace_s=600)
        with pytest.raises(KubeError):  # the recorder answers GETs only: creating fails
            store.ensure("team-a", [template])
    assert recording.paths[0] == f"{TEAM_A}/resourceclaimtemplates/odd%252Fname"


def test_a_node_name_is_one_quoted_segment_of_its_path() -> None:
    with recording_api() as recording:
        publisher = SlicePublisher(recording.api, node="node%41", profile=DEFAULT, gpus=GPUS)
        with pytest.raises(PublishError, match="does not exist"):
            publisher.sync()
    assert recording.paths == ["/api/v1/nodes/node%2541"]


def test_the_sweeper_lists_the_referrers_it_always_listed() -> None:
    with recording_api() as recording:
        assert Sweeper(recording.api, grace_s=600).referenced("team-a") == set()
    assert recording.paths == [
        f"{path}?limit={LIST_PAGE_SIZE}"  # read in pages
        for path in (
            "/api/v1/namespaces/team-a/pods",
            "/api/v1/namespaces/team-a/replicationcontrollers",
            "/apis/apps/v1/namespaces/team-a/deployments",
            "/apis/apps/v1/namespaces/team-a/replicasets",
            "/apis/apps/v1/namespaces/team-a/statefulsets",
            "/apis/apps/v1/namespaces/team-a/daemonsets",
            "/apis/batch/v1/namespaces/team-a/jobs",
            "/apis/batch/v1/namespaces/team-a/cronjobs",
            "/apis/batch.volcano.sh/v1alpha1/namespaces/team-a/jobs",
        )
    ]


def test_a_valid_claim_has_the_path_it_always_had() -> None:
    ref = ClaimRef("team-a", "claim-1.x", "0b2c4d6e-0000-4000-8000-000000000001")
    assert ref.api_path == f"{TEAM_A}/resourceclaims/claim-1.x"
