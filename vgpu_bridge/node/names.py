"""What the kubelet may name a claim: checked before a name becomes a host path or an API path.

A claim's uid becomes file names (`claims/<uid>/`, the CDI spec, the limits file) that the agent
later deletes as root, and its namespace and name become the API path the agent reads. The API
server makes uids lowercase UUIDs, namespaces DNS labels and claim names DNS subdomains
(RFC 1123); anything else (`../../etc`, `?watch=true`, `..`) is refused with the field and the
reason before it reaches a path.
"""

from __future__ import annotations

import re

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
DNS_LABEL = re.compile(_LABEL)
DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
MAX_SUBDOMAIN = 253


class BadName(ValueError):
    """A claim uid, namespace or name that is not what the API server would have made."""


def check_uid(uid: str, *, field: str = "uid") -> str:
    if not UUID.fullmatch(uid):
        raise BadName(f"{field}: must be a lowercase UUID, got {_show(uid)}")
    return uid


def check_namespace(namespace: str, *, field: str = "namespace") -> str:
    if not DNS_LABEL.fullmatch(namespace):
        raise BadName(f"{field}: must be a DNS label (RFC 1123), got {_show(namespace)}")
    return namespace


def check_name(name: str, *, field: str = "name") -> str:
    if len(name) > MAX_SUBDOMAIN or not DNS_SUBDOMAIN.fullmatch(name):
        raise BadName(f"{field}: must be a DNS subdomain (RFC 1123), got {_show(name)}")
    return name


def _show(value: str) -> str:
    """The value quoted, cut short: it came from outside and goes into a log line."""
    return repr(value[:80] + ("..." if len(value) > 80 else ""))
