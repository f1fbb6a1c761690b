"""A small typed REST client for the local apiserver (admin client certificate, JSON in and out).

The harness needs a dozen calls; a few lines over ``http.client`` keep them typed and
independent of any generated client's model of the (fast-moving) DRA API.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from e2e.cluster.pki import KeyPair

Json = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class ApiError(RuntimeError):
    """The apiserver answered with an error status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class KubeClient:
    host: str
    port: int
    ca_file: Path
    client: KeyPair
    timeout_s: float = 30.0

    def get(self, path: str, **query: str) -> Json:
        return self.request("GET", path, query=query)

    def items(self, path: str, **query: str) -> list[Json]:
        """The ``items`` of a list call."""
        items: list[Json] = self.get(path, **query).get("items") or []
        return items

    def exists(self, path: str) -> bool:
        """Whether GET ``path`` finds the object (404: no); other errors are raised."""
        try:
            self.get(path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def create(self, path: str, body: Json) -> Json:
        return self.request("POST", path, body=body)

    def terminating_namespaces(self) -> list[str]:
        """Namespaces being deleted: nothing can be made in them, and the namespace controller
        lists and deletes in them meanwhile (requests a count test must not see)."""
        return [n["metadata"]["name"] for n in self.items("/api/v1/namespaces")
                if n.get("status", {}).get("phase") == "Terminating"]  # fmt: skip

    def patch(self, path: str, body: Json, *, content_type: str = MERGE_PATCH) -> Json:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def replace(self, path: str, body: Json) -> Json:
        return self.request("PUT", path, body=body)

    def delete(self, path: str, *, grace_period_s: int | None = None) -> Json | None:
        """Delete; ``None`` when the object was already gone."""
        body: Json | None = None
        if grace_period_s is not None:
            body = {
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "gracePeriodSeconds": grace_period_s,
            }
        try:
            return self.request("DELETE", path, body=body)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Json | None = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Json:
        url = f"{path}?{urlencode(query)}" if query else path
        connection = http.client.HTTPSConnection(
            self.host, self.port, context=self._tls(), timeout=self.timeout_s
        )
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Accept": "application/json", "Content-Type": content_type}
            connection.request(method, url, body=payload, headers=headers)
            response = connection.getresponse()
            text = response.read().decode()
        finally:
            connection.close()
        if response.status >= 400:
            raise ApiError(method, url, response.status, text)
        result: Json = json.loads(text) if text else {}
        return result

    def healthy(self, endpoint: str = "/readyz") -> bool:
        try:
            connection = http.client.HTTPSConnection(
                self.host, self.port, context=self._tls(), timeout=5
            )
            connection.request("GET", endpoint)
            ok = connection.getresponse().status == 200
            connection.close()
        except OSError:
            return False
        return ok

    def _tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.client.cert), str(self.client.key))
        return context


@contextmanager
def created_unless_present(kube: KubeClient, path: str, body: Json) -> Iterator[str]:
    """`body` created at `path` while the block runs, unless it is there already (then it is
    left as found: another test or the chart owns it); its name."""
    name: str = body["metadata"]["name"]
    try:
        kube.create(path, body)
        created = True
    except ApiError as error:
        if error.status != 409:
            raise
        created = False
    try:
        yield name
    finally:
        if created:
            kube.delete(f"{path}/{name}")
