"""`KubeApi.list_all`: a list read in pages (`limit`, `continue`) through the real client, from a
loopback server; a forgotten snapshot (410) starts the list over once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.status.served_api import ServedApi, served_api
from vgpu_bridge.kube import LIST_PAGE_SIZE, KubeApi, KubeError

PODS = "/api/v1/pods"


@pytest.fixture
def served() -> Iterator[ServedApi]:
    with served_api() as api:
        yield api


def connected(served: ServedApi, tmp_path: Path) -> KubeApi:
    return KubeApi.connect(str(served.kubeconfig(tmp_path, current="served")))


def page(names: list[str], *, token: str = "", version: str = "7") -> dict[str, object]:
    meta = {"resourceVersion": version, **({"continue": token} if token else {})}
    return {
        "kind": "PodList",
        "metadata": meta,
        "items": [{"metadata": {"name": n}} for n in names],
    }


def test_every_page_is_read_and_the_snapshot_version_kept(
    served: ServedApi, tmp_path: Path
) -> None:
    served.serve(PODS, page(["a", "b"], token="t1"), labelSelector="app=x")
    served.serve_page(PODS, page(["c"], token="t2"), {"labelSelector": "app=x", "continue": "t1"})
    served.serve_page(PODS, page(["d"]), {"labelSelector": "app=x", "continue": "t2"})
    listed = connected(served, tmp_path).list_all(PODS, labelSelector="app=x")
    assert [item["metadata"]["name"] for item in listed.items] == ["a", "b", "c", "d"]
    assert listed.resource_version == "7"
    asked = [query for path, query in served.asked if path == PODS]
    assert [q.get("continue") for q in asked] == [None, "t1", "t2"]
    assert {q["limit"] for q in asked} == {str(LIST_PAGE_SIZE)}


def test_an_expired_snapshot_starts_the_list_over_once(served: ServedApi, tmp_path: Path) -> None:
    served.serve(PODS, page(["a"], token="old"))
    served.serve_page(PODS, {"kind": "Status", "code": 410}, {"continue": "old"}, status=410)
    with pytest.raises(KubeError) as raised:
        connected(served, tmp_path).list_all(PODS)
    assert raised.value.status == 410
    firsts = [q for path, q in served.asked if path == PODS and "continue" not in q]
    assert len(firsts) == 2  # started over once, then gave up


def test_keep_trims_each_item_as_its_page_arrives(served: ServedApi, tmp_path: Path) -> None:
    served.serve(PODS, page(["a", "skip"], token="t1"))
    served.serve_page(PODS, page(["c"]), {"continue": "t1"})
    seen: list[str] = []

    def keep(item: dict[str, object]) -> dict[str, object] | None:
        name = str(item["metadata"]["name"])  # type: ignore[index]
        seen.append(name)
        return None if name == "skip" else {"kept": name}

    listed = connected(served, tmp_path).list_all(PODS, keep=keep)
    assert listed.items == [{"kept": "a"}, {"kept": "c"}]
    assert seen == ["a", "skip", "c"]
