"""API paths: a name from a pod stays one path segment of the one resource it names."""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.recording_api import RecordingApi
from vgpu_bridge.kube import KubeError, KubePathError, api_path, check_path

CLAIMS = "/apis/resource.k8s.io/v1"
HOSTILE = [
    "../../other-ns/resourceclaims/x",
    "?watch=true",
    "../../../../../api/v1/pods",
    "x#fragment",
    "a/b",
    "%2e%2e",
    "..%2F..%2Fpods",
    "x y",
    "\u00e9\n",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_api_path_keeps_a_hostile_name_inside_one_segment(name: str) -> None:
    path = api_path(CLAIMS, "namespaces", "team-a", "resourceclaims", name)
    head, _, last = path.rpartition("/")
    assert head == f"{CLAIMS}/namespaces/team-a/resourceclaims"
    assert "?" not in last
    assert "#" not in last
    assert unquote(last) == name


@pytest.mark.parametrize("segment", ["", ".", ".."])
def test_api_path_refuses_segments_that_are_no_name(segment: str) -> None:
    with pytest.raises(KubePathError, match="segment"):
        api_path(CLAIMS, "namespaces", segment, "resourceclaims", "x")


@pytest.mark.parametrize(
    "path",
    [
        f"{CLAIMS}/namespaces/team-a/resourceclaims/../../other-ns/resourceclaims/x",
        f"{CLAIMS}/namespaces/team-a/resourceclaims/?watch=true",
        f"{CLAIMS}/namespaces/team-a/resourceclaims/x#y",
        f"{CLAIMS}/namespaces//resourceclaims/x",
        f"{CLAIMS}/namespaces/team-a/resourceclaims/..%2F..%2Fpods",
        f"{CLAIMS}/namespaces/team-a/resourceclaims/%2e%2e",
        "api/v1/pods",
    ],
)
def test_a_path_that_could_reach_another_resource_is_never_sent(
    recorded: RecordingApi, path: str
) -> None:
    with pytest.raises(KubePathError):
        recorded.api.get(path)
    assert recorded.paths == []


def test_a_quoted_hostile_name_reaches_the_server_as_one_segment(
    recorded: RecordingApi,
) -> None:
    name = "x?watch=true#y"
    with pytest.raises(KubeError, match="HTTP 404"):
        recorded.api.get(api_path(CLAIMS, "namespaces", "team-a", "resourceclaims", name))
    assert recorded.paths == [f"{CLAIMS}/namespaces/team-a/resourceclaims/x%3Fwatch%3Dtrue%23y"]


def test_a_quoted_slash_is_never_sent_either(recorded: RecordingApi) -> None:
    """The API server decodes %2F before it splits the path: `..%2Fx` would be `../x` there."""
    with pytest.raises(KubePathError):
        recorded.api.get(api_path(CLAIMS, "namespaces", "team-a", "resourceclaims", "../x"))
    assert recorded.paths == []


@given(st.text(min_size=1, max_size=40).filter(lambda n: n not in (".", "..")))
def test_any_name_is_one_segment_or_is_never_sent(name: str) -> None:
    path = api_path(CLAIMS, "namespaces", "team-a", "resourceclaims", name)
    segments = path.split("/")
    assert segments[:-1] == [*CLAIMS.split("/"), "namespaces", "team-a", "resourceclaims"]
    assert unquote(segments[-1]) == name
    try:
        check_path(path)
    except KubePathError:
        assert "/" in name or "\\" in name
