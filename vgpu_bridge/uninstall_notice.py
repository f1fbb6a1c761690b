"""`vgpu-bridge uninstall-notice`: the chart's pre-delete hook, run before `helm uninstall` (or
Flux, or Argo CD's PreDelete) deletes anything.

Why a hook: `helm uninstall` deletes the agents' ServiceAccount and RBAC in the same call as their
DaemonSet, so by an agent's SIGTERM its token is refused and it can tell no pod anything; and a
pod deleted just before stays Terminating until its DRA driver unprepares its claims (the kubelet
waits for that, kubernetes/kubernetes#129402), which needs the agents still registered. Here,
with everything still installed:

1. list the ResourceClaims allocated by our agents' drivers (`--drivers`: ours, or the enforcer's
   under nvidiaDriver), paged, and their pods (`status.reservedFor`), at most MAX_PODS;
2. wait, at most `--wait-seconds`, until each pod already being deleted is gone (the agents,
   still running, unprepare its claims meanwhile);
3. post one Warning Event (`VgpuBridgeUninstalled`, `note`) on each pod still running, at most
   MAX_PODS; the pods are read within READ_S and told within TELL_S;
4. print what was done, and exit 0, also when pods are still terminating or the API refused us:
   the notice is advice, never a gate. A failed pre-delete hook makes helm delete nothing and leave
   the release `uninstalling`, after which `helm install` refuses the name until
   `helm uninstall --no-hooks` (seen on kind); so an error is printed with its reason and the
   uninstall goes on. Only bad flags (a chart bug) exit 2.

The agents post no Event of their own at uninstall: this hook is the one teller.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, TextIO

from vgpu_bridge.core.profiles import DEFAULT
from vgpu_bridge.flag_settings import FlagSettings, comma_list, setting
from vgpu_bridge.kube import (
    KubeApi,
    KubeConfigError,
    KubeError,
    api_path,
    dns_subdomain_problem,
    unreachable_reason,
)

Json = dict[str, Any]
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
EVENTS = "/apis/events.k8s.io/v1"
PODS = "/api/v1"
EVENT_REASON = "VgpuBridgeUninstalled"
MAX_NOTE = 1024  # events.k8s.io/v1 refuses a longer note
MAX_PODS = 1000  # pods looked at, waited for and told at most
POLL_S = 2.0  # how often the terminating pods are read again during the wait
READ_S = 60.0  # what reading the pods once may take
TELL_S = 60.0  # what posting the Events may take
SHOWN = 20  # pods named in each line of the summary
REPORTER = "vgpu-bridge-uninstall-notice"  # the Events' reportingInstance
PROG = "vgpu-bridge uninstall-notice"


def _drivers_problem(text: str) -> str | None:
    names = comma_list(text)
    if not names:
        return "must name at least one driver"
    return next((f"{n!r}: {p}" for n in names if (p := dns_subdomain_problem(n))), None)


@dataclass(frozen=True, kw_only=True)
class NoticeSettings(FlagSettings):
    """`vgpu-bridge uninstall-notice` (the chart's pre-delete hook)."""

    prog: ClassVar[str] = PROG

    drivers: str = setting(
        DEFAULT.driver,
        description="comma list of the DRA drivers our agents register as, whose claims' pods "
        "are waited for and told",
        check=_drivers_problem,
    )
    wait_seconds: float = setting(
        60.0, ge=0, le=3600, description="how long to wait for pods being deleted to go"
    )
    kubeconfig: str | None = setting(None, description="kubeconfig; in-cluster if unset")
    request_timeout: float = setting(10.0, gt=0, le=120, description="seconds per API request")


@dataclass(frozen=True, order=True)
class PodRef:
    """A pod holding one of our claims (the first one found names the claim and driver)."""

    namespace: str
    name: str
    uid: str
    claim: str  # the claim's name, in the pod's namespace
    driver: str  # the driver of the claim's device the pod loses


def note(pod: PodRef, *, node: str) -> str:
    """What the pod loses and what deleting it will do, at most MAX_NOTE characters."""
    return (
        f"vgpu-bridge is being uninstalled from node {node}: the limits file and shared region "
        f"of claim {pod.claim} are removed with it, so processes this pod starts from then on "
        f"are not held to its GPU share (the claim stays allocated). Deleting the pod afterwards "
        f"leaves it Terminating until DRA driver {pod.driver} is installed again (the kubelet "
        f"waits for it to unprepare the claim), or use kubectl delete pod --force."
    )[:MAX_NOTE]


def event_body(pod: PodRef, *, node: str, wall: float) -> Json:
    stamp = datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"{pod.name[:200]}.{secrets.token_hex(8)}",
            "namespace": pod.namespace,
        },
        "eventTime": stamp,
        "reportingController": pod.driver,
        "reportingInstance": REPORTER,
        "action": "Uninstall",
        "reason": EVENT_REASON,
        "type": "Warning",
        "regarding": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
        },
        "note": note(pod, node=node),
    }


def claim_pods(claim: Json, drivers: frozenset[str]) -> list[PodRef] | None:
    """The pods a claim allocated by one of `drivers` is reserved for; None for another's claim
    (kept by `list_all` item by item: nothing else of a claim is held)."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    ours = next((r.get("driver") for r in results if r.get("driver") in drivers), None)
    if ours is None:
        return None
    meta = claim.get("metadata") or {}
    return [
        PodRef(
            str(meta.get("namespace", "")),
            str(user.get("name", "")),
            str(user["uid"]),
            str(meta.get("name", "")),
            str(ours),
        )
        for user in status.get("reservedFor") or []
        if user.get("resource") == "pods" and not user.get("apiGroup") and user.get("uid")
    ]


@dataclass(frozen=True)
class Pods:
    """The pods holding our claims, each once, at most MAX_PODS; `more`: how many past it."""

    pods: list[PodRef]
    more: int


def pods_holding_claims(api: KubeApi, drivers: frozenset[str], *, limit: int = MAX_PODS) -> Pods:
    def kept(claim: Json) -> Json | None:
        pods = claim_pods(claim, drivers)
        return None if pods is None else {"pods": pods}

    found: dict[str, PodRef] = {}
    for claim in api.list_all(CLAIMS, keep=kept).items:
        for pod in claim["pods"]:
            found.setdefault(pod.uid, pod)
    ordered = sorted(found.values())
    return Pods(ordered[:limit], max(len(ordered) - limit, 0))


def read_pod(api: KubeApi, pod: PodRef) -> Json | None:
    """The pod as it is now; None when it is gone (404, or another pod under its name)."""
    try:
        current = api.get(api_path(PODS, "namespaces", pod.namespace, "pods", pod.name))
    except KubeError as error:
        if error.status == 404:
            return None
        raise
    return current if (current.get("metadata") or {}).get("uid") == pod.uid else None


@dataclass
class Notice:
    """What the hook found and did, for the summary."""

    drivers: frozenset[str]
    wait_seconds: float
    holding: int = 0
    over_limit: int = 0
    running: list[tuple[PodRef, str]] = field(default_factory=list)  # with its node
    terminating: list[PodRef] = field(default_factory=list)
    gone_while_waiting: list[PodRef] = field(default_factory=list)
    still_terminating: list[PodRef] = field(default_factory=list)
    told: list[PodRef] = field(default_factory=list)
    not_told: list[PodRef] = field(default_factory=list)  # out of time, or the namespace gone
    skipped: int = 0  # finished, not on a node yet, or gone already
    unread: int = 0  # not read in time: neither waited for nor told


def sort_pods(
    api: KubeApi, found: Pods, notice: Notice, *, seconds: float = READ_S,
    clock: Callable[[], float] = time.monotonic,
) -> None:  # fmt: skip
    """Each pod read once, within `seconds`: being deleted, running on a node, or nothing to
    do; those not read in time are counted in `notice.unread`."""
    notice.holding, notice.over_limit = len(found.pods) + found.more, found.more
    deadline = clock() + seconds
    for index, pod in enumerate(found.pods):
        if clock() > deadline:
            notice.unread = len(found.pods) - index
            return
        current = read_pod(api, pod)
        if current is None:
            notice.skipped += 1
        elif (current.get("metadata") or {}).get("deletionTimestamp"):
            notice.terminating.append(pod)
        elif (current.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            notice.skipped += 1  # its containers are gone; the kubelet unprepares it
        elif node := (current.get("spec") or {}).get("nodeName"):
            notice.running.append((pod, str(node)))
        else:
            notice.skipped += 1  # reserved, not bound yet: nothing was prepared for it


def wait_for_terminating(
    api: KubeApi, notice: Notice, *, clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:  # fmt: skip
    """Until every pod being deleted is gone, at most `notice.wait_seconds`."""
    deadline = clock() + notice.wait_seconds
    waiting = list(notice.terminating)
    while waiting:
        still = [pod for pod in waiting if read_pod(api, pod) is not None]
        notice.gone_while_waiting += [pod for pod in waiting if pod not in still]
        waiting = still
        if not waiting or clock() >= deadline:
            break
        sleep(min(POLL_S, max(deadline - clock(), 0)))
    notice.still_terminating = waiting


def tell_running(api: KubeApi, notice: Notice, *, seconds: float = TELL_S) -> None:
    """One Warning Event on each running pod, within `seconds`. A namespace deleted meanwhile
    (404, or 403 while it terminates) tells nobody there; any other refusal is raised."""
    deadline = time.monotonic() + seconds
    for pod, node in notice.running:
        if time.monotonic() > deadline:
            notice.not_told.append(pod)
            continue
        path = api_path(EVENTS, "namespaces", pod.namespace, "events")
        try:
            api.create(path, event_body(pod, node=node, wall=time.time()))
        except KubeError as error:
            if error.status == 404 or (error.status == 403 and "being terminated" in error.body):
                notice.not_told.append(pod)
                continue
            raise
        notice.told.append(pod)


def run_notice(
    api: KubeApi, settings: NoticeSettings, *, sleep: Callable[[float], None] = time.sleep
) -> Notice:
    """The hook's work (module doc), steps 1 to 3."""
    notice = Notice(frozenset(comma_list(settings.drivers)), settings.wait_seconds)
    sort_pods(api, pods_holding_claims(api, notice.drivers), notice)
    wait_for_terminating(api, notice, sleep=sleep)
    tell_running(api, notice)
    return notice


def _names(pods: Iterable[PodRef]) -> str:
    listed = sorted(f"{p.namespace}/{p.name}" for p in pods)
    more = f" and {len(listed) - SHOWN} more" if len(listed) > SHOWN else ""
    return ", ".join(listed[:SHOWN]) + more


def summary(notice: Notice) -> list[str]:
    """The lines the hook prints (helm shows them with the Job's logs)."""
    drivers = ", ".join(sorted(notice.drivers))
    lines = [f"{PROG}: {notice.holding} pods hold claims of {drivers}"]
    if notice.over_limit:
        lines.append(f"  only the first {MAX_PODS} were looked at ({notice.over_limit} more)")
    lines.append(
        f"  waited for {len(notice.terminating)} pods being deleted (their claims unprepared by "
        f"the agents): {len(notice.gone_while_waiting)} gone"
    )
    if notice.still_terminating:
        lines.append(
            f"  {len(notice.still_terminating)} still terminating after {notice.wait_seconds:g} s;"
            " the uninstall goes on: once the agents are gone they stay Terminating until "
            "vgpu-bridge is installed again, or are deleted with kubectl delete pod --force: "
            + _names(notice.still_terminating)
        )
    told = f"  told {len(notice.told)} running pods (Warning Event {EVENT_REASON})"
    lines.append(told + (f": {_names(notice.told)}" if notice.told else ""))
    if notice.not_told:
        lines.append(f"  not told (out of time, or namespace gone): {_names(notice.not_told)}")
    if notice.unread:
        lines.append(
            f"  {notice.unread} pods not read within {READ_S:g} s: neither waited for nor told"
        )
    if notice.skipped:
        lines.append(f"  {notice.skipped} pods finished, gone or not on a node: nothing to do")
    return lines


def failure_line(error: Exception) -> str | None:
    """Why the hook failed, in one line; None for an error that is a bug (its traceback shown)."""
    if isinstance(error, KubeConfigError):
        return str(error)
    if isinstance(error, KubeError):
        return f"the API server refused {str(error)[:400]}"
    reason = unreachable_reason(error)
    return f"cannot reach the API server: {reason}" if reason is not None else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    NoticeSettings.add_arguments(parser)


def main(args: argparse.Namespace, environ: Mapping[str, str], out: TextIO | None = None) -> int:
    out = out or sys.stdout
    settings = NoticeSettings.from_namespace_or_report(args, environ)
    if settings is None:
        return 2
    try:
        api = KubeApi.connect(settings.kubeconfig, timeout_s=settings.request_timeout)
        notice = run_notice(api, settings)
    except Exception as error:  # advice only: whatever failed, the uninstall goes on
        line = failure_line(error) or f"{type(error).__name__}: {error}"
        print(f"{PROG}: {line}; pods may not all be told; the uninstall goes on",
              file=sys.stderr)  # fmt: skip
        return 0
    print("\n".join(summary(notice)), file=out)
    return 0
