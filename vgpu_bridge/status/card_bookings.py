"""What every card's claims booked, read from the webhook (GET /bookings through the API server's
service proxy) instead of from a list of every claim of the cluster.

The webhook follows every ResourceClaim (`webhook/claim_bookings.py`) and sums what the allocated
ones consumed of each card. `kubectl vgpu status -n NS` needs those sums for its cards' BOOKED and
FREE; reading them from the claims means listing all of them (issue 26: 20,000 claims at 10,000
GPUs, 25 MB and 1.3 s of a 1 s budget). The webhook's Service is the one our
MutatingWebhookConfiguration sends reviews to (or `--webhook-service NAMESPACE/NAME`), never one
found by the chart's labels (`release`: anyone may label a Service and serve made-up bookings).
The caller needs `list` on mutatingwebhookconfigurations and `get` on the Service and its
`services/proxy`, which the chart's status-viewer ClusterRole and Role grant. Anything else (no such
configuration or Service, not allowed, the webhook not following yet, an answer that is not ours)
gives None, and the caller lists the claims as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from vgpu_bridge.kube import KubeApi, KubeError, api_path, dns_label_problem, unreachable_reason
from vgpu_bridge.status.release import Release

KIND, API_VERSION = "CardBookings", "vgpu-bridge.io/v1"
MAX_CARDS = 1_000_000  # far past any cluster; an answer longer than this is not the webhook's


class BookingsError(ValueError):
    """The answer is not a CardBookings document."""


@dataclass(frozen=True)
class CardBooked:
    """What the claims allocated on one card consumed of it: bytes and SM percent."""

    memory: int
    cores: int


Bookings = dict[tuple[str, str], CardBooked]


def webhook_bookings(api: KubeApi, release: Release, notes: list[str]) -> Bookings | None:
    """The webhook's per-card sums, or None (with a note when `--webhook-service` named it and it
    failed)."""
    named = release.webhook_service
    for service in release.webhook_services() or ():
        try:
            return parse_bookings(api.get(_proxy_path(api, service)))
        except Exception as error:  # one way or another not answered: the claims say it too
            if not isinstance(error, KubeError | ValueError) and not unreachable_reason(error):
                raise
            if named:
                notes.append(f"the webhook's bookings ({named}): not read ({str(error)[:160]})")
    return None


def _proxy_path(api: KubeApi, service: str) -> str:
    """The service proxy path of GET /bookings on the Service's port named `https` (the chart's),
    else its first port."""
    namespace, _, name = service.partition("/")
    if problem := dns_label_problem(namespace):
        raise ValueError(f"--webhook-service: the namespace {problem}")
    if problem := dns_label_problem(name):
        raise ValueError(f"--webhook-service: the name {problem}")
    spec = api.get(api_path("/api/v1", "namespaces", namespace, "services", name)).get("spec")
    ports = (spec or {}).get("ports") or []
    named = [p for p in ports if p.get("name") == "https"] or ports[:1]
    if not named:
        raise ValueError(f"the Service {service} has no port")
    port = str(named[0].get("name") or named[0].get("port"))
    if dns_label_problem(port):  # a port's name is a label, its number digits: both pass
        raise ValueError(f"the Service {service}'s port {port[:80]!r} is not a port name")
    # built, not quoted: the proxy's scheme:name:port segment keeps its colons
    return f"/api/v1/namespaces/{namespace}/services/https:{name}:{port}/proxy/bookings"


def parse_bookings(document: Mapping[str, Any]) -> Bookings:
    """A CardBookings document; BookingsError naming what is wrong otherwise."""
    if document.get("kind") != KIND or document.get("apiVersion") != API_VERSION:
        raise BookingsError(f"not a {API_VERSION} {KIND} document")
    cards = document.get("cards")
    if not isinstance(cards, list) or len(cards) > MAX_CARDS:
        raise BookingsError(f"cards: must be a list of at most {MAX_CARDS}")
    booked: Bookings = {}
    for index, card in enumerate(cards):
        card = card if isinstance(card, dict) else {}
        node, device, memory, cores = (card.get(k) for k in ("node", "device", "memory", "cores"))
        if not isinstance(node, str) or not isinstance(device, str):
            raise BookingsError(f"cards[{index}]: node and device must be strings")
        if not _count(memory) or not _count(cores):
            raise BookingsError(f"cards[{index}]: memory and cores must be whole numbers >= 0")
        booked[(node, device)] = CardBooked(memory, cores)
    return booked


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
