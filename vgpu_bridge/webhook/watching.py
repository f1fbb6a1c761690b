"""List, then watch, one kind of object until told to stop: the loop behind the webhook's caches
(our driver's ResourceSlices, our ResourceClaimTemplates). A watch the server ends (its timeout)
is resumed from the last resourceVersion seen (bookmarks keep it fresh), so no event, a deletion
included, falls between two watches; any failure (an expired version too) relists after an
exponential backoff (ended by `stop` at once), so a cache never follows a broken watch.

The backoff spares a server that answers (errors, a slow list). While it refuses connections (it
is down: restarted, crashed) the list is tried every UNREACHABLE_RETRY_S instead, and the backoff
starts over after: a refused connection costs it nothing, and a backoff grown during the outage
would leave every cache stale for up to LAST_RETRY_S after its return (issue 38: tries at 0.5,
1.5, 3.5, 7.5, 15.5, 31.5 and 61.5 s left a 35 s outage unnoticed for 26 s more). Each cache logs
when it follows again after failing, with how many tries failed and for how long.

A watch asks for WATCH_TIMEOUT_S (a minute) and is then resumed, no relist: a connection that
went silent (an API server gone without a reset) is noticed by its read timeout, 10 s more.

When a cache is current (`on_current`, `on_stale`): a list tells what was true when it was read,
and only the watch from its version says what changed since. So a cache counts as current only
once the watch after a list or a resume is established (its response headers came: the server
has registered it from that version, and every later change reaches it), and stops counting as
soon as a watch ends, for any reason (a failure, the server's timeout, its shutdown). Decisions
that must not use stale counts (the quota gate's caches) read the API server directly while
their cache is not current. Issue 38, on kind: right after an API server outage the relist was
served at once, but the restarted server refused watches with 429 while its own watch cache
initialized, which the HTTP client retries quietly after each Retry-After (seconds); a quota
raised in those seconds was unseen by every decision until the watch came. Not current costs a
list per admission for the round trip of each minute's resume and for the seconds after a
return, no more. Readiness is another matter (the inventory's `synced`: set at the first list,
never cleared), so a replica stays an endpoint for the API server throughout."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from vgpu_bridge.kube import LIST_PAGE_SIZE, Json, KubeApi, connection_refused
from vgpu_bridge.logs import get_logger

log = get_logger("vgpu_bridge.webhook.watching")
FIRST_RETRY_S, LAST_RETRY_S = 0.5, 30.0
#: how often the list is tried while the API server refuses connections
UNREACHABLE_RETRY_S = 1.0
#: each watch asks for this long; its read timeout is 10 s more, so a connection that died
#: without a word is given up within 70 s (a live one hears a bookmark 2 s before its end)
WATCH_TIMEOUT_S = 60


class WatchError(RuntimeError):
    """The API server ended a watch with an ERROR event."""


def skipped(version: str) -> Json:
    """The event a watch's `screen` yields for a line it passes over unread: a SKIPPED event that
    only moves the version the watch resumes from."""
    return {"type": "SKIPPED", "object": {"metadata": {"resourceVersion": version}}}


def follow(
    api: KubeApi,
    path: str,
    *,
    stop: threading.Event,
    on_list: Callable[[list[Json]], None],
    on_event: Callable[[str, Json], None],
    what: str,
    on_stale: Callable[[], None] = lambda: None,
    on_current: Callable[[], None] = lambda: None,
    watch_timeout_s: int = WATCH_TIMEOUT_S,
    keep: Callable[[Json], Json | None] | None = None,
    page_size: int = LIST_PAGE_SIZE,
    screen: Callable[[bytes], Json | None] | None = None,
    **selectors: str,
) -> None:
    """Until `stop`: list `path` (narrowed by `selectors`), hand the items to `on_list`, then each
    ADDED/MODIFIED/DELETED event to `on_event`, watching again from where a watch ended; relist
    after a failure. `on_current` is called once a watch after a list or a resume is established,
    `on_stale` as soon as a watch ends or fails (see the module's docstring). `keep` trims each
    listed item as it is read (see `KubeApi.list_all`, `page_size` items a page); events reach
    `on_event` whole, but for those `screen` passes over unread (see `KubeApi.watch`): a SKIPPED
    event only moves the version a watch resumes from."""
    delay_s = FIRST_RETRY_S
    failing = _Failing(what)
    while not stop.is_set():
        try:
            listed = api.list_all(path, keep=keep, limit=page_size, **selectors)
            version = listed.resource_version
            on_list(listed.items)
            del listed  # what on_list kept of the items is theirs: none held twice while watching
            failing.over()
            watching = _Watching(on_event, on_current, on_stale, watch_timeout_s, screen)
            _follow_from(api, path, version, stop, watching, selectors)
        except Exception as error:  # any failure: relist after a backoff
            on_stale()
            failing.failed()
            refused = connection_refused(error)
            wait_s = UNREACHABLE_RETRY_S if refused else delay_s
            log.warning(f"{what} watch failed; retrying", error=str(error), retry_in_s=wait_s)
            stop.wait(wait_s)
            delay_s = FIRST_RETRY_S if refused else min(delay_s * 2, LAST_RETRY_S)
        else:
            on_stale()
            delay_s = FIRST_RETRY_S


class _Failing:
    """Since when the lists of one cache fail, to say so once it follows again."""

    def __init__(self, what: str) -> None:
        self._what, self._since, self._failures = what, 0.0, 0

    def failed(self) -> None:
        if not self._failures:
            self._since = time.monotonic()
        self._failures += 1

    def over(self) -> None:
        if self._failures:
            log.info(f"{self._what} watch follows again", failed_tries=self._failures,
                     failing_for_s=round(time.monotonic() - self._since, 1))  # fmt: skip
        self._failures = 0


@dataclass(frozen=True)
class _Watching:
    """What one cache's watches report to, and how they are asked."""

    on_event: Callable[[str, Json], None]
    on_current: Callable[[], None]
    on_stale: Callable[[], None]
    timeout_s: int
    screen: Callable[[bytes], Json | None] | None


def _follow_from(
    api: KubeApi,
    path: str,
    version: str,
    stop: threading.Event,
    watching: _Watching,
    selectors: dict[str, str],
) -> None:
    while not stop.is_set():
        resumed_at = version
        version = _watch(api, path, version, stop, watching, selectors)
        watching.on_stale()  # ended: what changes next is unseen until the next watch answers
        if version == resumed_at:  # ended with nothing to say: no tight loop on a server that
            stop.wait(FIRST_RETRY_S)  # ends every watch at once


def _watch(
    api: KubeApi,
    path: str,
    version: str,
    stop: threading.Event,
    watching: _Watching,
    selectors: dict[str, str],
) -> str:
    """One watch from `version`; returns the last resourceVersion it reported."""
    events = api.watch(path, resource_version=version, timeout_s=watching.timeout_s,
                       screen=watching.screen, established=watching.on_current,
                       allowWatchBookmarks="true", **selectors)  # fmt: skip
    for event in events:
        if stop.is_set():
            break
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":  # e.g. 410: the version is too old to resume from
            raise WatchError(f"watch error: {obj.get('message', obj)}")
        version = (obj.get("metadata") or {}).get("resourceVersion") or version
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            watching.on_event(str(kind), obj)
    return version
