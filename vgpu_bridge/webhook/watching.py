"""List, then watch, one kind of object until told to stop: the loop behind the webhook's caches
(our driver's ResourceSlices, our ResourceClaimTemplates). A watch the server ends (its timeout)
is resumed from the last resourceVersion seen (bookmarks keep it fresh), so no event, a deletion
included, falls between two watches; any failure (an expired version too) relists after an
exponential backoff (ended by `stop` at once), so a cache never follows a broken watch."""

from __future__ import annotations

import threading
from collections.abc import Callable

from vgpu_bridge.kube import LIST_PAGE_SIZE, Json, KubeApi
from vgpu_bridge.logs import get_logger

log = get_logger("vgpu_bridge.webhook.watching")
FIRST_RETRY_S, LAST_RETRY_S = 0.5, 30.0


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
    watch_timeout_s: int = 300,
    keep: Callable[[Json], Json | None] | None = None,
    page_size: int = LIST_PAGE_SIZE,
    screen: Callable[[bytes], Json | None] | None = None,
    **selectors: str,
) -> None:
    """Until `stop`: list `path` (narrowed by `selectors`), hand the items to `on_list`, then each
    ADDED/MODIFIED/DELETED event to `on_event`, watching again from where a watch ended; relist
    after a failure. `on_stale` is called as soon as the events stop (a failure): what was learnt
    may change unseen until `on_list` is called again. `keep` trims each listed item as it
    is read (see `KubeApi.list_all`, `page_size` items a page); events reach `on_event` whole,
    but for those `screen` passes over unread (see `KubeApi.watch`): a SKIPPED event only moves
    the version a watch resumes from."""
    delay_s = FIRST_RETRY_S
    while not stop.is_set():
        try:
            listed = api.list_all(path, keep=keep, limit=page_size, **selectors)
            version = listed.resource_version
            on_list(listed.items)
            del listed  # what on_list kept of the items is theirs: none held twice while watching
            _follow_from(api, path, version, stop, on_event, watch_timeout_s, selectors, screen)
        except Exception as error:  # any failure: relist after a backoff
            on_stale()
            log.warning(f"{what} watch failed; retrying", error=str(error), retry_in_s=delay_s)
            stop.wait(delay_s)
            delay_s = min(delay_s * 2, LAST_RETRY_S)
        else:
            on_stale()
            delay_s = FIRST_RETRY_S


def _follow_from(
    api: KubeApi,
    path: str,
    version: str,
    stop: threading.Event,
    on_event: Callable[[str, Json], None],
    timeout_s: int,
    selectors: dict[str, str],
    screen: Callable[[bytes], Json | None] | None,
) -> None:
    while not stop.is_set():
        resumed_at = version
        version = _watch(api, path, version, stop, on_event, timeout_s, selectors, screen)
        if version == resumed_at:  # ended with nothing to say: no tight loop on a server that
            stop.wait(FIRST_RETRY_S)  # ends every watch at once


def _watch(
    api: KubeApi,
    path: str,
    version: str,
    stop: threading.Event,
    on_event: Callable[[str, Json], None],
    timeout_s: int,
    selectors: dict[str, str],
    screen: Callable[[bytes], Json | None] | None,
) -> str:
    """One watch from `version`; returns the last resourceVersion it reported."""
    for event in api.watch(path, resource_version=version, timeout_s=timeout_s, screen=screen,
                           allowWatchBookmarks="true", **selectors):  # fmt: skip
        if stop.is_set():
            break
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":  # e.g. 410: the version is too old to resume from
            raise WatchError(f"watch error: {obj.get('message', obj)}")
        version = (obj.get("metadata") or {}).get("resourceVersion") or version
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            on_event(str(kind), obj)
    return version
