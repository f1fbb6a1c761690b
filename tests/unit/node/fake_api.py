"""An API server in a dict, for the slice publisher: a Node and the ResourceSlices written to it.
`broken` makes every call raise that error, as an API server that fails would."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from kubernetes import client

from tests.unit.node.claims import NODE
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.node.publisher import SLICES

Json = dict[str, Any]


class FakeApi(KubeApi):
    def __init__(self) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self.slices: dict[str, Json] = {}
        self.broken: Exception | None = None
        self._versions = itertools.count(1)

    def get(self, path: str) -> Json:
        return self._answer("GET", path)

    def list(self, path: str, **query: Any) -> Json:
        return self._answer("GET", path)

    def create(self, path: str, body: Json, **query: Any) -> Json:
        return self._answer("POST", path, body)

    def replace(self, path: str, body: Json) -> Json:
        return self._answer("PUT", path, body)

    def delete(self, path: str, *, preconditions: Json | None = None) -> Json:
        return self._answer("DELETE", path)

    def _answer(self, method: str, path: str, body: Json | None = None) -> Json:
        if self.broken is not None:
            raise self.broken
        if (method, path) == ("GET", f"/api/v1/nodes/{NODE}"):
            return {"metadata": {"name": NODE, "uid": "node-uid"}}
        if (method, path) == ("GET", SLICES):
            return {"items": copy.deepcopy(list(self.slices.values()))}
        name = path.rsplit("/", 1)[-1]
        if method == "DELETE":
            del self.slices[name]
            return {}
        assert body is not None
        name = body["metadata"]["name"]
        stored = copy.deepcopy(body)
        stored["metadata"].setdefault("uid", f"uid-{name}")
        stored["metadata"]["resourceVersion"] = str(next(self._versions))
        self.slices[name] = stored
        return copy.deepcopy(stored)
