"""What the agent does at SIGTERM when it is being uninstalled, and how it tells that from a
restart.

**Uninstall or restart.** SIGTERM comes for both: a rolling update, an eviction or a node drain
restart the agent, and the next one needs every file on the node (running containers keep their
limits, the kubelet unprepares claims prepared before); `helm uninstall` deletes the agent's
DaemonSet, and nothing comes back to clean up after it. The agent knows its DaemonSet by name
(`--daemonset`, `--daemonset-namespace`: the chart sets them, so no pod is read) and watches it
from the start (`OwnerWatch`): `helm uninstall` deletes the agent's ServiceAccount and RBAC in the
same call, so by the time SIGTERM comes the agent's token may be refused, while a watch opened
before has already been told of the deletion. At SIGTERM one read decides when it can be made
(404 or a deletionTimestamp: uninstall; the DaemonSet there: restart); when it cannot, what the
watch last saw decides. Anything else (the DaemonSet never seen, the API unreadable and the watch
saw nothing) is a restart: node state is never deleted on a guess.

**Uninstall** (`uninstall`): new claims are refused at once; the kubelet's sockets keep serving
while the kubelet unprepares the claims of pods terminating on the node (it blocks their
termination until their driver unprepares them, kubernetes/kubernetes#129402), until no claim is
prepared or `--uninstall-drain-seconds` pass (the agent reads no pods, so it cannot tell a
terminating pod from a running one: a node with running GPU pods waits the whole drain). Then
the sockets go, and everything of ours on the node (`remove_node_files`): our driver's CDI specs,
the limits files, every claim's shared-region dir (host-pids inside), the priority dir, the
stand-in driver of mock cards, the installed libvgpu.so and ld.so.preload, the checkpoint and its
lock. Container-writable dirs go through the trash and `files.remove_tree` (never through a
link), in passes bounded in time.
The claims still prepared are logged. The agent tells no pod: by its SIGTERM `helm uninstall`
has deleted its RBAC, so its Events would be refused; the chart's pre-delete hook
(`vgpu_bridge/uninstall_notice.py`) tells the running pods before anything is deleted.
"""

from __future__ import annotations

import enum
import errno
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vgpu_bridge.kube import KubeApi, KubeError, api_path
from vgpu_bridge.logs import get_logger
from vgpu_bridge.node import claimdirs
from vgpu_bridge.node.cdi import (
    CLAIMS_DIR,
    LIBRARY_FILE,
    LIMITS_FILE_PATTERN,
    PRELOAD_FILE,
    CdiLayout,
)
from vgpu_bridge.node.checkpoint import QUARANTINE_SUFFIX, PreparedClaim
from vgpu_bridge.node.files import remove, remove_temp_files, remove_tree
from vgpu_bridge.node.mock_driver import mock_driver_dir
from vgpu_bridge.node.state import LOCK_FILE, DeviceState

Json = dict[str, Any]
log = get_logger("vgpu_bridge.node.uninstall")

DAEMONSETS = "/apis/apps/v1"
DRAIN_POLL_S = 0.5  # how often the drain looks at the prepared claims (in memory, no API)
WATCH_RETRY_S = 5.0  # after a failed list or watch of the DaemonSet
REMOVAL_S = 20.0  # what the removal of the node's files may take (its passes; a tenant's tree)
SUCCESSOR_WAIT_S = 10.0  # an uninstall waits at least this for a DaemonSet made again (see above)
REFUSAL = "the vgpu-bridge agent on this node is being uninstalled: no new claim is prepared"


class Owner(enum.Enum):
    """The agent's DaemonSet as last read or watched."""

    UNKNOWN = "unknown"  # not read yet, or the read failed
    PRESENT = "present"
    DELETING = "deleting"  # a deletionTimestamp: foreground deletion, or a finalizer
    GONE = "gone"


def owner_state(daemonset: Json | None) -> Owner:
    """`daemonset` as read (None: 404, or a watch's DELETED event)."""
    if daemonset is None:
        return Owner.GONE
    if (daemonset.get("metadata") or {}).get("deletionTimestamp"):
        return Owner.DELETING
    return Owner.PRESENT


def is_uninstall(*, read: Owner, watched: Owner, seen_present: bool,
                 successor: bool = False) -> bool:  # fmt: skip
    """Whether SIGTERM means uninstall: the DaemonSet seen present once in this agent's life,
    and now gone or being deleted, by a read at SIGTERM or (the read failing) the watch's last
    event. A DaemonSet present (a rolling update, an eviction, a drain), a successor (made again
    under the same name), or nothing known: no."""
    if not seen_present or successor:
        return False
    now = read if read is not Owner.UNKNOWN else watched
    return now in (Owner.GONE, Owner.DELETING)


class OwnerWatch:
    """The agent's DaemonSet, listed then watched (`run`, in its own thread) from the start, and
    read once more at SIGTERM (`uninstalling`)."""

    def __init__(self, api: KubeApi, *, namespace: str, name: str) -> None:
        self.api = api
        self.name = name
        self._collection = api_path(DAEMONSETS, "namespaces", namespace, "daemonsets")
        self._watched = Owner.UNKNOWN
        self._seen_present = False
        self._own_uid = ""  # the first DaemonSet seen present: the one that made this agent
        self._successor_uid = ""  # one of the same name seen present after, with another uid
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        return api_path(self._collection, self.name)

    def run(self, stop: threading.Event) -> None:
        """List and watch until `stop`; a failure is logged and the list made again later."""
        while not stop.is_set():
            try:
                self._list_and_watch(stop)
            except Exception as error:  # the API unreachable, 401/403 after an uninstall, ...
                log.warning("cannot watch the agent's DaemonSet; retrying", error=str(error))
                stop.wait(WATCH_RETRY_S)

    def _list_and_watch(self, stop: threading.Event) -> None:
        selector = f"metadata.name={self.name}"
        listed = self.api.list(self._collection, fieldSelector=selector)
        items = listed.get("items") or []
        self._note(items[0] if items else None)
        version = str((listed.get("metadata") or {}).get("resourceVersion", ""))
        for event in self.api.watch(self._collection, resource_version=version,
                                    fieldSelector=selector):  # fmt: skip
            kind, found = event.get("type"), event.get("object") or {}
            if kind == "ERROR":  # e.g. 410: the version is too old; list again
                return
            self._note(None if kind == "DELETED" else found)
            if stop.is_set():
                return

    def _note(self, daemonset: Json | None) -> None:
        state = owner_state(daemonset)
        with self._lock:
            self._watched = state
            self._note_present(daemonset, state)
        if state is not Owner.PRESENT:
            log.info("the agent's DaemonSet is going", daemonset=self.name, state=state.value)

    def _note_present(self, daemonset: Json | None, state: Owner) -> None:
        """Under the lock: the first uid seen present is the agent's own; another, a successor."""
        if state is not Owner.PRESENT or daemonset is None:
            return
        self._seen_present = True
        uid = str((daemonset.get("metadata") or {}).get("uid") or "")
        if not self._own_uid:
            self._own_uid = uid
        elif uid and uid != self._own_uid and not self._successor_uid:
            self._successor_uid = uid
            log.info("the agent's DaemonSet was made again: a SIGTERM now is a restart",
                     daemonset=self.name, uid=uid, was=self._own_uid)  # fmt: skip

    def successor(self, *, read: bool = False) -> bool:
        """Whether a DaemonSet of the same name with another uid has been seen (the watch's
        events; with `read`, one GET now as well)."""
        if read:
            self.read()
        with self._lock:
            return bool(self._successor_uid)

    def read(self) -> Owner:
        """One GET now; UNKNOWN when it fails other than by 404."""
        try:
            found = self.api.get(self.path)
        except KubeError as error:
            return Owner.GONE if error.status == 404 else Owner.UNKNOWN
        except Exception:  # unreachable after the client's retries
            return Owner.UNKNOWN
        state = owner_state(found)
        with self._lock:
            self._note_present(found, state)
        return state

    def uninstalling(self) -> bool:
        """At SIGTERM: whether the agent is being uninstalled (`is_uninstall`), logged."""
        read = self.read()
        with self._lock:
            watched, seen = self._watched, self._seen_present
            successor = bool(self._successor_uid)
        verdict = is_uninstall(read=read, watched=watched, seen_present=seen, successor=successor)
        log.info("SIGTERM: " + ("uninstall" if verdict else "restart; node files stay"),
                 daemonset=self.name, read=read.value, watched=watched.value,
                 seen_present=seen, successor=successor)  # fmt: skip
        return verdict


def drain(state: DeviceState, *, seconds: float, at_least: float = 0.0,
          successor: Callable[[], bool] = lambda: False,
          clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> list[PreparedClaim] | None:  # fmt: skip
    """Wait while claims are prepared, at most `seconds` (and at least `at_least`, prepared claims
    or not): the kubelet unprepares those of pods terminating on the node meanwhile. What is still
    prepared after; None as soon as `successor()` says the DaemonSet was made again."""
    start = clock()
    deadline, earliest = start + seconds, start + min(at_least, seconds)
    while True:
        if successor():
            return None
        left = state.snapshot()
        now = clock()
        if now >= deadline or (not left and now >= earliest):
            return left
        sleep(min(DRAIN_POLL_S, max(deadline - now, 0)))


@dataclass(frozen=True)
class NodeFiles:
    """Where our files are on the node."""

    layout: CdiLayout
    checkpoint_file: Path


def remove_node_files(files: NodeFiles, *, seconds: float = REMOVAL_S) -> list[str]:
    """Remove everything of ours on the node (only names we write; a link is never followed);
    what could not be removed, each as `path: reason` (empty: nothing is left)."""
    deadline = time.monotonic() + seconds
    layout = files.layout
    mock_dir = mock_driver_dir(layout.vgpu_dir)
    left: list[str] = []
    steps: list[tuple[str, Callable[[], None]]] = [
        ("CDI specs", lambda: _remove_named(layout.cdi_dir, layout.spec_name_pattern)),
        ("limits files", lambda: _remove_dir_of(layout.limits_dir, LIMITS_FILE_PATTERN)),
        ("claim dirs", lambda: _remove_claim_dirs(layout, deadline)),
        ("priority dir", lambda: _remove_tree_by(layout.vgpu_dir, layout.priority_dir, deadline)),
        ("mock driver", lambda: _remove_tree_by(layout.vgpu_dir, mock_dir, deadline)),
        ("libvgpu", lambda: _remove_library(layout.vgpu_dir)),
        ("checkpoint", lambda: _remove_checkpoint(files.checkpoint_file)),
    ]
    for what, step in steps:
        try:
            step()
        except OSError as error:  # the other steps go on; reported below
            left.append(f"{what}: {error}")
    left += _still_there(files)
    return left


def _remove_named(directory: Path, pattern: str) -> None:
    """The entries of `directory` named by `pattern` (and the temp files of a killed write)."""
    remove_temp_files(directory, pattern)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if re.fullmatch(pattern, name):
            remove(directory / name, durable=False)  # unlinks a link itself, never its target


def _remove_dir_of(directory: Path, pattern: str) -> None:
    """`_remove_named`, then the directory when nothing else is in it."""
    _remove_named(directory, pattern)
    _remove_empty_dir(directory)


def _remove_empty_dir(directory: Path) -> None:
    """`directory` when empty. Someone else's file in it (ENOTEMPTY) keeps it, reported as left
    by `_still_there` if it is ours; a mount point of the agent's own pod (EBUSY: the vgpu dir and
    the plugin dir are the chart's hostPath volumes, made by the kubelet) stays, empty, and is
    told apart by `mount_points_left`."""
    try:
        os.rmdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EBUSY):
            raise


def mount_points_left(files: NodeFiles) -> list[str]:
    """The agent's own hostPath dirs still on the node after `remove_node_files`: the pod mounts
    them, so they cannot go while it runs; `_still_there` makes sure nothing of ours is in them."""
    dirs = (files.layout.vgpu_dir, files.checkpoint_file.parent)
    return [str(d) for d in dirs if os.path.isdir(d) and not os.path.islink(d)]


def _remove_claim_dirs(layout: CdiLayout, deadline: float) -> None:
    """Every claim's dir into the trash (renames), the trash emptied in bounded passes, then the
    claims dir and the trash themselves."""
    claims = layout.vgpu_dir / CLAIMS_DIR
    try:
        names = os.listdir(claims)
    except FileNotFoundError:
        names = []
    for name in names:
        claimdirs.trash(layout, name)
    trash = claimdirs.trash_dir(layout)
    while _entries(trash) and time.monotonic() < deadline:
        claimdirs.empty_trash(layout)
    _remove_empty_dir(trash)
    _remove_empty_dir(claims)


def _entries(directory: Path) -> bool:
    try:
        return bool(os.listdir(directory))
    except FileNotFoundError:
        return False


def _remove_tree_by(root: Path, path: Path, deadline: float) -> None:
    """`path` (an entry of `root` a container can write in) in bounded passes."""
    while os.path.lexists(path) and time.monotonic() < deadline:
        remove_tree(root, path, budget=claimdirs.removal_budget())


def _remove_library(vgpu_dir: Path) -> None:
    """libvgpu.so and ld.so.preload (running containers keep the copies they have mounted),
    then the vgpu dir itself when nothing else is in it."""
    for name in (LIBRARY_FILE, PRELOAD_FILE):
        remove(vgpu_dir / name, durable=False)
    _remove_empty_dir(vgpu_dir)


def _remove_checkpoint(checkpoint_file: Path) -> None:
    """The checkpoint, its temp files, the corrupt copies kept aside, the lock file; then the
    plugin dir when nothing else is in it (its sockets are gone already)."""
    plugin_dir = checkpoint_file.parent
    name = re.escape(checkpoint_file.name)
    _remove_named(plugin_dir, rf"{name}|{name}{re.escape(QUARANTINE_SUFFIX)}[0-9T.]+")
    remove(plugin_dir / LOCK_FILE, durable=False)
    _remove_empty_dir(plugin_dir)


def _still_there(files: NodeFiles) -> list[str]:
    """What a node should not hold any more after `remove_node_files`, if it does."""
    layout = files.layout
    ours = [layout.limits_dir, layout.vgpu_dir / CLAIMS_DIR, layout.priority_dir,
            layout.vgpu_dir / LIBRARY_FILE, mock_driver_dir(layout.vgpu_dir),
            files.checkpoint_file]  # fmt: skip
    left = [f"{path}: still there" for path in ours if os.path.lexists(path)]
    try:
        specs = [n for n in os.listdir(layout.cdi_dir) if re.fullmatch(layout.spec_name_pattern, n)]
    except FileNotFoundError:
        specs = []
    return left + [f"{layout.cdi_dir / name}: still there" for name in specs]


@dataclass(frozen=True)
class Uninstall:
    """The parts the uninstall works with (`app.run` makes it from the agent)."""

    state: DeviceState
    workers_done: Callable[[], None]  # returns once the periodic work has stopped
    stop_serving: Callable[[], None]  # the kubelet's sockets closed and removed
    files: NodeFiles
    drain_seconds: float
    # whether the DaemonSet was made again under the same name (`OwnerWatch.successor`)
    successor: Callable[..., bool] = lambda read=False: False
    successor_wait_s: float = SUCCESSOR_WAIT_S

    def run(self) -> None:
        """Refuse new claims, drain, stop serving, remove our files: unless the DaemonSet is made
        again meanwhile (then a restart: every file stays)."""
        self.state.refuse_new_claims(REFUSAL)
        left = drain(self.state, seconds=self.drain_seconds, at_least=self.successor_wait_s,
                     successor=self.successor)  # fmt: skip
        if left is not None:
            log.info("uninstall: drain over", claims_still_prepared=len(left),
                     claims=[f"{c.namespace}/{c.name}" for c in left[:20]])  # fmt: skip
        self.workers_done()
        self.stop_serving()
        if left is None or self.successor(read=True):
            log.info("uninstall called off: the agent's DaemonSet was made again; "
                     "a restart, node files stay")  # fmt: skip
            return
        not_removed = remove_node_files(self.files)
        if not_removed:
            log.error("uninstall: files of ours are left on the node", left=not_removed[:20])
        else:
            log.info("uninstall: nothing of ours is left on the node",
                     empty_mount_points=mount_points_left(self.files))  # fmt: skip
