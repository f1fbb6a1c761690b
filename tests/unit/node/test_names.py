"""Claim uids, namespaces and names from the kubelet: only what the API server would make."""

from __future__ import annotations

import pytest

from vgpu_bridge.node.names import BadName, check_name, check_namespace, check_uid

UID = "0c1a1d00-0000-4000-8000-000000000001"


def test_what_the_api_server_makes_passes() -> None:
    assert check_uid(UID) == UID
    assert check_namespace("team-a") == "team-a"
    assert check_name("pod-gpu-x1.v2") == "pod-gpu-x1.v2"
    assert check_name("a" * 63 + "." + "b" * 63) == "a" * 63 + "." + "b" * 63


@pytest.mark.parametrize(
    "uid", ["../../../../etc", "..", "", "uid-1", UID.upper(), UID + "/x", UID + "\n", f" {UID}"]
)
def test_a_uid_that_is_not_a_lowercase_uuid_is_refused_with_the_field(uid: str) -> None:
    with pytest.raises(BadName, match=r"^claim uid: must be a lowercase UUID, got "):
        check_uid(uid, field="claim uid")


@pytest.mark.parametrize(
    "name",
    ["../../other-ns/resourceclaims/x", "?watch=true", "..", "", "A", "a_b", "-a", "a.", "a" * 254,
     "a%2f..", "a/b", "a" * 64],
)  # fmt: skip
def test_a_name_that_is_not_a_dns_subdomain_is_refused(name: str) -> None:
    with pytest.raises(BadName, match=r"^name: must be a DNS subdomain \(RFC 1123\)"):
        check_name(name)


@pytest.mark.parametrize("namespace", ["a.b", "?x", "", "Team", "a" * 64, "../kube-system"])
def test_a_namespace_that_is_not_a_dns_label_is_refused(namespace: str) -> None:
    with pytest.raises(BadName, match=r"^namespace: must be a DNS label"):
        check_namespace(namespace)


def test_a_long_value_is_cut_short_in_the_message() -> None:
    with pytest.raises(BadName) as caught:
        check_uid("x" * 10_000)
    assert len(str(caught.value)) < 200
