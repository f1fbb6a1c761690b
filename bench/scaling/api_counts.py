"""The API server's own count of requests (``apiserver_request_total`` on its /metrics), read
before and after something runs: what that something asked for, with no audit log and nothing
changed in the client that is measured.

The counter has no label for who asked, so a count is the whole cluster's: a private cluster
with nothing else running (the benchmark) reads exactly the measured client's requests; a
shared one (the e2e session, where the kubelet stand-in lists pods five times a second) reads
exact counts only for requests nothing else makes meanwhile.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from bench.scaling.bulk import ApiConnection
from e2e.cluster.client import KubeClient

METRIC = "apiserver_request_total"
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
T = TypeVar("T")


class RequestKind(NamedTuple):
    verb: str  # LIST, GET, WATCH, CREATE, ...
    resource: str  # "resourceclaims"; "" for a non-resource path (/metrics, /version)
    scope: str  # "cluster", "namespace" or "resource" (one object)


def request_totals(kube: KubeClient) -> Counter[RequestKind]:
    """Requests the API server has answered since it started, by kind."""
    connection = ApiConnection(kube)
    try:
        text = connection.send("GET", "/metrics").decode()
    finally:
        connection.close()
    totals: Counter[RequestKind] = Counter()
    for line in text.splitlines():
        if not line.startswith(METRIC + "{"):
            continue
        labels_text, _, value = line[len(METRIC) + 1 :].rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        kind = RequestKind(labels.get("verb", ""), labels.get("resource", ""),
                           labels.get("scope", ""))  # fmt: skip
        totals[kind] += int(float(value))
    return totals


@dataclass(frozen=True)
class Requests:
    """The requests the API server answered between two readings of its counter."""

    counts: Counter[RequestKind]

    def lists(self, resource: str, *, scope: str | None = None) -> int:
        """LIST requests of `resource` (each page of a paged list is one), of one scope or all."""
        return sum(
            n
            for kind, n in self.counts.items()
            if kind.verb == "LIST" and kind.resource == resource and scope in (None, kind.scope)
        )

    def on_resources(self) -> int:
        """Every request on a resource (the readings of /metrics themselves are not)."""
        return sum(n for kind, n in self.counts.items() if kind.resource)


def counted(kube: KubeClient, action: Callable[[], T]) -> tuple[T, Requests]:
    """`action()`'s result and the requests the API server answered while it ran."""
    before = request_totals(kube)
    result = action()
    after = request_totals(kube)
    after.subtract(before)
    return result, Requests(+after)
