"""A thin JSON client for the Kubernetes API: dicts in, dicts out, transient failures retried.

Built on the official client's configuration and connection pool (kubeconfig, in-cluster token,
client certificates), without its generated models: the webhook and the node agent work on the
wire format. Shared by both binaries; nothing else of ours talks to the API. The client package
is imported when a connection is made, not with this module: a webhook answers its first reviews
while it loads (`KubeApi.connect_on_first_use`).
"""

from __future__ import annotations

import functools
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar
from urllib.parse import quote, unquote

if TYPE_CHECKING:
    from kubernetes.client import ApiClient
    from urllib3 import BaseHTTPResponse

Json = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class KubeError(RuntimeError):
    """The API server answered with an error status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.method = method
        self.path = path
        self.status = status
        self.body = body


class KubeConfigError(RuntimeError):
    """No way to reach the API server: the kubeconfig (or in-cluster config) is unusable."""


class KubePathError(ValueError):
    """A path that could reach another resource than the one it names: never sent."""


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NOT_A_NAME = ("", ".", "..")


def dns_subdomain_problem(name: object) -> str | None:
    """Why `name` is not an RFC 1123 DNS subdomain (the rule for most object names), or None."""
    if not isinstance(name, str):
        return f"must be a DNS subdomain (a string), got {type(name).__name__}"
    if len(name) > 253 or not all(_DNS_LABEL.match(part) for part in name.split(".")):
        return (
            "must be a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 "
            f"characters), got {name[:80]!r}"
        )
    return None


def dns_label_problem(name: object) -> str | None:
    """Why `name` is not an RFC 1123 DNS label (the rule for namespaces), or None."""
    if not isinstance(name, str) or _DNS_LABEL.match(name) is None:
        shown = repr(name[:80]) if isinstance(name, str) else type(name).__name__
        return f"must be a DNS label (lowercase letters, digits and '-', at most 63), got {shown}"
    return None


def api_path(prefix: str, *segments: str) -> str:
    """`prefix` (ours, e.g. `/apis/resource.k8s.io/v1`) and each segment, quoted whole: a name
    taken from a user's object stays one path segment, whatever it holds."""
    for segment in segments:
        if segment in _NOT_A_NAME:
            raise KubePathError(f"{segment!r} is not a path segment a name can be")
    return prefix + "".join("/" + quote(segment, safe="") for segment in segments)


def check_path(path: str) -> None:
    """Refuse a path whose segments the server (or urllib3) would read as something else:
    `.`/`..` (also percent-encoded), empty segments, an encoded `/`, a query or a fragment."""
    if not path.startswith("/") or "?" in path or "#" in path:
        raise KubePathError(f"{path[:200]!r}: an API path starts with / and has no ? or #")
    for segment in path[1:].split("/"):
        decoded = unquote(segment)
        if decoded in _NOT_A_NAME or "/" in decoded or "\\" in decoded:
            raise KubePathError(f"{path[:200]!r}: segment {segment[:80]!r} is not a name")


def unreachable_reason(error: BaseException) -> str | None:
    """Why the API server could not be reached, in a few words ("connection refused", "timed
    out"), when `error` is the transport's own failure (after every retry); None otherwise."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    if isinstance(error, ApiException) and error.status == 0:  # the client's TLS failure
        return f"TLS handshake failed ({_last_line(str(error.reason))})"
    if not isinstance(error, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError):
        return None
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason
    if isinstance(error, urllib3.exceptions.SSLError):
        return f"TLS handshake failed ({_last_line(str(error))})"
    cause: BaseException | None = error  # the socket's own reason, when there is one
    while cause is not None:
        if isinstance(cause, socket.gaierror):
            return f"cannot resolve its host name ({cause.strerror})"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror[:1].lower() + cause.strerror[1:]
        cause = cause.__cause__ or cause.__context__
    # after the chain: urllib3's NewConnectionError is a ConnectTimeoutError too
    if isinstance(error, urllib3.exceptions.TimeoutError | TimeoutError):
        return "no answer in time (timed out)"
    if isinstance(error, urllib3.exceptions.ProtocolError):
        return "the connection was closed without an answer"
    return _last_line(str(error))


def connection_refused(error: BaseException) -> bool:
    """Whether `error` is the API server's port refusing the connection: nothing listens, so it
    did no work for us. A connection reset or a timeout is not: a server that dropped a list
    half-way, or is too slow to answer, had work to do and is backed off from."""
    import urllib3

    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no reason given"


def context_namespace(
    kubeconfig: str | None, *, context: str | None = None, environ: Mapping[str, str]
) -> str:
    """The namespace kubectl uses without `-n`: the kubeconfig context's `namespace` (`context`,
    or the current one), else `default`; in a pod without a kubeconfig, the pod's own."""
    from kubernetes import config

    if not kubeconfig:
        if environ.get("POD_NAMESPACE"):
            return environ["POD_NAMESPACE"]
        try:
            return Path(IN_CLUSTER_NAMESPACE).read_text().strip() or "default"
        except OSError:
            return "default"
    try:
        contexts, current = config.list_kube_config_contexts(kubeconfig)
    except (config.ConfigException, OSError) as error:
        raise KubeConfigError(f"cannot read kubeconfig {kubeconfig}: {error}") from error
    chosen = (
        current
        if context is None
        else next((c for c in contexts or () if c.get("name") == context), None)
    )
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"


IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, KubeError):
        return exc.status in TRANSIENT_STATUS
    import urllib3  # loaded already: the client that raised `exc` uses it

    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


_P = ParamSpec("_P")
_R = TypeVar("_R")
ATTEMPTS = 4


def _retrying(call: Callable[_P, _R]) -> Callable[_P, _R]:
    """Up to `ATTEMPTS` tries of `call` while it fails transiently, 0.1 s, 0.2 s, 0.4 s apart
    (at most 2 s); the last failure is raised as it is. Tenacity is imported on the first call,
    not with this module (the webhook answers reviews before it needs the API)."""

    @functools.wraps(call)
    def retried(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

        for attempt in Retrying(
            retry=retry_if_exception(_transient),
            stop=stop_after_attempt(ATTEMPTS),
            wait=wait_exponential(multiplier=0.1, max=2),
            reraise=True,
        ):
            with attempt:
                return call(*args, **kwargs)
        raise AssertionError("unreachable: Retrying reraises the last failure")

    return retried


def load_client(kubeconfig: str | None, *, context: str | None = None) -> ApiClient:
    """A client from a kubeconfig file (its current context, or `context`), or the pod's service
    account when none is given; a `KubeConfigError` says which could not be read, and why."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        elif context:
            raise config.ConfigException(f"context {context!r} needs a kubeconfig")
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (config.ConfigException, OSError) as error:
        source = f"--kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster config"
        raise KubeConfigError(f"cannot read {source}: {error}") from error
    return client.ApiClient(configuration)


class _ClientOnFirstUse:
    """Loads the client once, on the first call from any thread; a `KubeConfigError` is
    remembered and raised again to every later caller."""

    def __init__(self, kubeconfig: str | None) -> None:
        self._kubeconfig = kubeconfig
        self._lock = threading.Lock()
        self._client: ApiClient | None = None
        self._error: KubeConfigError | None = None

    def __call__(self) -> ApiClient:
        with self._lock:
            if self._client is None and self._error is None:
                try:
                    self._client = load_client(self._kubeconfig)
                except KubeConfigError as error:
                    self._error = error
            if self._error is not None:
                raise KubeConfigError(str(self._error)) from self._error
            assert self._client is not None
            return self._client


#: items per page of `KubeApi.list_all` (kubectl asks for 500)
LIST_PAGE_SIZE = 500
LIST_CHUNK_BYTES = 256 * 1024


_Page = tuple[list[Json], Json]  # a list's items and its metadata


@dataclass(frozen=True, slots=True)
class Listed:
    """A whole list: its items and the resourceVersion to watch it from."""

    items: list[Json]
    resource_version: str


class KubeApi:
    def __init__(self, api_client: ApiClient, *, timeout_s: float = 5.0) -> None:
        self._connection: Callable[[], ApiClient] = lambda: api_client
        self._timeout_s = timeout_s

    @classmethod
    def connect(
        cls, kubeconfig: str | None, *, timeout_s: float = 5.0, context: str | None = None
    ) -> KubeApi:
        """Connected now: see `load_client`."""
        return cls(load_client(kubeconfig, context=context), timeout_s=timeout_s)

    @classmethod
    def connect_on_first_use(cls, kubeconfig: str | None, *, timeout_s: float = 5.0) -> KubeApi:
        """Reads the kubeconfig (and imports the client package) on the first request, or on
        `connected()`; until then a process pays nothing for them."""
        api = cls.__new__(cls)
        api._connection = _ClientOnFirstUse(kubeconfig)
        api._timeout_s = timeout_s
        return api

    def connected(self) -> None:
        """Makes the connection now if it is not yet made; `KubeConfigError` if it cannot be."""
        self._connection()

    @property
    def server(self) -> str:
        """The API server's URL, as the kubeconfig (or in-cluster config) names it."""
        host: str = self._client.configuration.host
        return host

    @property
    def _client(self) -> ApiClient:
        return self._connection()

    def _serialize(
        self, method: str, path: str, query: Mapping[str, Any] | None, body: Any, content_type: str
    ) -> tuple[str, str, dict[str, str], Any]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        serialized = self._client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return serialized[0], serialized[1], serialized[2], serialized[3]

    @_retrying
    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Json:
        check_path(path)
        method_, url, headers, payload = self._serialize(method, path, query, body, content_type)
        response = self._client.rest_client.request(
            method_, url, headers=headers, body=payload, _request_timeout=self._timeout_s
        )
        data = response.read() or b"{}"
        if response.status >= 400:
            raise KubeError(method, path, response.status, data.decode(errors="replace"))
        parsed: Json = json.loads(data)
        return parsed

    def get(self, path: str) -> Json:
        return self.request("GET", path)

    @_retrying
    def get_text(self, path: str) -> str:
        """GET a path that answers text, not JSON (a pod's `/metrics` through the pod proxy)."""
        check_path(path)
        method, url, headers, _ = self._serialize("GET", path, None, None, "application/json")
        headers["Accept"] = "text/plain, */*"
        response = self._client.rest_client.request(
            method, url, headers=headers, _request_timeout=self._timeout_s
        )
        data: bytes = response.read() or b""
        if response.status >= 400:
            raise KubeError("GET", path, response.status, data.decode(errors="replace"))
        return data.decode(errors="replace")

    def list(self, path: str, **query: Any) -> Json:
        return self.request("GET", path, query=query)

    def list_all(
        self, path: str, *, keep: Callable[[Json], Json | None] | None = None, **query: Any
    ) -> Listed:
        """Every item at `path`, read `limit` (LIST_PAGE_SIZE unless given) at a time: the API
        server answers a big cluster's lists in pages it can serve cheaply. The pages are one
        consistent snapshot; when the server has forgotten it (410: the continue token expired),
        the list starts over, once. Each page is decoded item by item as it arrives
        (`streamed_list`), and `keep` turns each item into what is kept of it (None: nothing),
        so a caller that needs little of each object never holds a page whole."""
        for attempt in (1, 2):
            items: list[Json] = []
            page: dict[str, Any] = {}
            try:
                while True:
                    page_items, meta = self._list_page(
                        path, {"limit": LIST_PAGE_SIZE, **query, **page}, keep
                    )
                    items += page_items
                    token = meta.get("continue")
                    if not token:
                        return Listed(items, str(meta.get("resourceVersion", "")))
                    page = {"continue": token}
            except KubeError as error:
                if error.status != 410 or not page or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @_retrying
    def _list_page(
        self, path: str, query: Mapping[str, Any], keep: Callable[[Json], Json | None] | None
    ) -> _Page:
        """One page: its items (as `keep` makes them) and its metadata, read as it streams."""
        from vgpu_bridge.streamed_list import read_list

        response = self._stream("GET", path, query, timeout_s=self._timeout_s)
        try:
            return read_list(response.stream(LIST_CHUNK_BYTES), keep=keep)
        finally:
            response.release_conn()

    def _stream(
        self, what: str, path: str, query: Mapping[str, Any], *, timeout_s: float
    ) -> BaseHTTPResponse:
        """The response to a GET of `path`, its body not read yet (the caller streams it and
        releases the connection); KubeError (`what` the request) when it failed."""
        check_path(path)
        method, url, headers, _ = self._serialize("GET", path, query, None, "application/json")
        response = self._client.rest_client.pool_manager.request(
            method, url, headers=headers, preload_content=False, timeout=timeout_s
        )
        if response.status >= 400:
            try:
                body = response.read().decode(errors="replace")
            finally:
                response.release_conn()
            raise KubeError(what, path, response.status, body)
        return response

    def create(self, path: str, body: Json, **query: Any) -> Json:
        return self.request("POST", path, query=query, body=body)

    def replace(self, path: str, body: Json) -> Json:
        return self.request("PUT", path, body=body)

    def merge_patch(self, path: str, patch: Json) -> Json:
        return self.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    def delete(self, path: str, *, preconditions: Json | None = None) -> Json:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": preconditions or {}}
        return self.request("DELETE", path, body=body)

    def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_s: int = 300,
        screen: Callable[[bytes], Json | None] | None = None,
        established: Callable[[], None] = lambda: None,
        **selectors: str,
    ) -> Iterator[Json]:
        """The events of one watch request, until the server ends it; `selectors` narrows it
        (`labelSelector=…`, `fieldSelector=…`). `screen` sees each event's line first: what it
        returns is yielded instead of decoding the line (None: decode it), for events a caller
        can tell it does not need from their bytes. `established` is called once the server has
        answered the request (its headers came): from then on it reports every change after
        `resource_version` (a refusal it asked to retry, 429 with Retry-After, is not an answer)."""
        query = {**selectors, "watch": "true", "resourceVersion": resource_version,
                 "timeoutSeconds": timeout_s}  # fmt: skip
        response = self._stream("WATCH", path, query, timeout_s=timeout_s + 10)
        established()
        try:
            buffer = b""
            for chunk in response.stream(64 * 1024):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield (screen and screen(line)) or json.loads(line)
        finally:
            response.release_conn()
