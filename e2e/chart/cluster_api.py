"""What the chart tests ask the local API server: where an object lives (discovery), server-side
apply (dry run or real), requests as another user (impersonation), and access reviews."""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from e2e.cluster.client import ApiError, KubeClient

Json = dict[str, Any]
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "vgpu-bridge-chart-test"


@dataclass
class Discovery:
    kube: KubeClient
    _resources: dict[str, list[Json]] = field(default_factory=dict)

    def path(self, obj: Json) -> str:
        """The REST path of ``obj`` (with its name); KeyError when the API is not served."""
        api_version, kind = obj["apiVersion"], obj["kind"]
        resource = next((r for r in self._listing(api_version) if r["kind"] == kind), None)
        if resource is None:
            raise KeyError(f"{api_version} {kind} is not served by this cluster")
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        meta = obj["metadata"]
        if resource["namespaced"]:
            base += f"/namespaces/{meta['namespace']}"
        return f"{base}/{resource['name']}/{meta['name']}"

    def served(self, obj: Json) -> bool:
        try:
            self.path(obj)
        except KeyError:
            return False
        return True

    def _listing(self, api_version: str) -> list[Json]:
        if api_version not in self._resources:
            base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            try:
                listed = self.kube.get(base).get("resources") or []
            except ApiError as error:
                if error.status != 404:
                    raise
                listed = []
            self._resources[api_version] = [r for r in listed if "/" not in r["name"]]
        return self._resources[api_version]


def server_side_apply(kube: KubeClient, path: str, obj: Json, *, dry_run: bool) -> Json:
    """``kubectl apply --server-side [--dry-run=server]`` of one object."""
    query = {"fieldManager": FIELD_MANAGER, "force": "true"}
    if dry_run:
        query["dryRun"] = "All"
    return kube.request("PATCH", path, body=obj, query=query, content_type=APPLY_PATCH)


@dataclass(frozen=True)
class Identity:
    """A user the admin client impersonates (a service account, optionally on a node)."""

    user: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, str], ...] = ()

    @classmethod
    def service_account(cls, namespace: str, name: str, *, node: str | None = None) -> Identity:
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")
        extra = () if node is None else (("authentication.kubernetes.io/node-name", node),)
        return cls(
            f"system:serviceaccount:{namespace}:{name}", (*groups, "system:authenticated"), extra
        )


def request_as(
    kube: KubeClient,
    identity: Identity,
    method: str,
    path: str,
    *,
    body: Json | None = None,
    query: dict[str, str] | None = None,
    content_type: str = "application/json",
) -> tuple[int, Json]:
    """(HTTP status, JSON body) of a request made as ``identity`` (a PATCH names its patch type
    in ``content_type``)."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    headers["Impersonate-User"] = identity.user
    for key, value in identity.extra:
        headers[f"Impersonate-Extra-{quote(key, safe='')}"] = value
    context = ssl.create_default_context(cafile=str(kube.ca_file))
    context.load_cert_chain(str(kube.client.cert), str(kube.client.key))
    connection = http.client.HTTPSConnection(kube.host, kube.port, context=context, timeout=30)
    url = f"{path}?{urlencode(query)}" if query else path
    try:
        payload = None if body is None else json.dumps(body).encode()
        # http.client sends one header per name: groups go as repeated putheader calls
        connection.putrequest(method, url)
        for name, value in headers.items():
            connection.putheader(name, value)
        for group in identity.groups:
            connection.putheader("Impersonate-Group", group)
        connection.putheader("Content-Length", str(len(payload or b"")))
        connection.endheaders(payload)
        response = connection.getresponse()
        text = response.read().decode()
    finally:
        connection.close()
    return response.status, (json.loads(text) if text else {})


def allowed(
    kube: KubeClient, identity: Identity, *, verb: str, group: str, resource: str, **more: str
) -> bool:
    """A SubjectAccessReview: may ``identity`` do ``verb`` on ``resource``?"""
    attributes = {"verb": verb, "group": group, "resource": resource, **more}
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": identity.user,
            "groups": list(identity.groups),
            "resourceAttributes": attributes,
        },
    }
    answer = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))
