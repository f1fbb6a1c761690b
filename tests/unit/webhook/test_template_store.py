"""The webhook's index of our ResourceClaimTemplates: it follows deletions, answers UNKNOWN
whenever it cannot tell (so the store asks the API server), and holds a bounded number of
entries. The store against the real API server is in e2e/webhook/test_hostile_tenants.py."""

from __future__ import annotations

from typing import Any

from tests.integration.webhook_harness import unreachable_api
from vgpu_bridge.webhook.templates import LAST_ADMITTED, UNKNOWN, Seen, TemplateIndex


def template(namespace: str, name: str, *, memory: str = "1Gi") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {LAST_ADMITTED: "2026-01-01T00:10:00Z"},
        },
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "memory": memory}]}}},
    }


def listed(*templates: dict[str, Any], max_entries: int = 100) -> TemplateIndex:
    index = TemplateIndex(unreachable_api(), max_entries=max_entries)
    index.replace(list(templates))
    return index


def test_a_listed_template_is_known_with_its_last_use_and_spec() -> None:
    index = listed(template("team-a", "vgpu-1"))
    seen = index.get("team-a", "vgpu-1")
    assert isinstance(seen, Seen)
    assert seen == Seen.of(template("team-a", "vgpu-1"))
    assert seen.spec != Seen.of(template("team-a", "vgpu-1", memory="2Gi")).spec
    assert index.get("team-a", "vgpu-2") is None  # synced: absent means absent
    assert index.count("team-a") == 1


def test_a_deleted_template_is_forgotten() -> None:
    index = listed(template("team-a", "vgpu-1"), template("team-a", "vgpu-2"))
    index.apply("DELETED", template("team-a", "vgpu-1"))
    assert index.get("team-a", "vgpu-1") is None
    assert index.count("team-a") == 1


def test_a_namespace_deleted_and_made_again_starts_empty() -> None:
    index = listed(template("team-a", "vgpu-1"))
    index.apply("DELETED", template("team-a", "vgpu-1"))  # the namespace's deletion, per object
    assert index.count("team-a") == 0
    assert len(index) == 0


def test_before_its_first_list_and_while_relisting_it_cannot_tell() -> None:
    index = TemplateIndex(unreachable_api())
    assert index.get("team-a", "vgpu-1") is UNKNOWN
    assert index.count("team-a") is None
    index.replace([template("team-a", "vgpu-1")])
    index.synced.clear()  # the watch stopped: deletions may go unseen until the next list
    assert index.get("team-a", "vgpu-2") is UNKNOWN
    assert index.count("team-a") is None


def test_it_holds_at_most_max_entries_and_then_cannot_tell_for_the_rest() -> None:
    index = listed(max_entries=50)
    for number in range(5_000):
        index.apply("ADDED", template(f"ns-{number % 7}", f"vgpu-{number}"))
    assert len(index) == 50
    assert index.get("ns-0", "vgpu-4999") is UNKNOWN  # not held: the store asks the API server
    assert index.count("ns-0") is None
    index.replace([template("team-a", "vgpu-1")])  # a fresh list starts over
    assert len(index) == 1
    assert index.get("ns-0", "vgpu-4999") is None


def test_remembered_and_forgotten_entries_keep_the_count_right() -> None:
    index = listed()
    seen = Seen.of(template("team-a", "vgpu-1"))
    for _ in range(3):
        index.remember("team-a", "vgpu-1", seen)
    assert len(index) == 1
    index.forget("team-a", "vgpu-1")
    index.forget("team-a", "vgpu-1")
    assert len(index) == 0
