"""Day two on kind, measured (issue 38, ``make bench-day2``): each scenario of the issue on the
chart as users install it, with its figure, under an open-loop load of GPU pod creates
(``bench/day2_load.py``, 20/s over three namespaces unless told).

1. ``helm upgrade`` previous release -> this tree under load: refused / timed-out creates.
2. agent rolling upgrade (previous -> this tree) on a node with running shares: their restarts
   and limits files, Prepare during the restart, Unprepare of pre-upgrade claims.
3. API server stopped 30 s under load, then etcd paused in bursts (SIGSTOP/SIGCONT): webhook
   ready again, refusals after the return, quota decisions vs a fresh list, slices, restarts.
4. node reboot (``docker stop``/``start`` of a GPU worker, a pod deleted meanwhile): files
   identical, the orphan's removed, time to Running.
5. SIGKILL of one webhook replica under load: refused creates.
6. ``helm uninstall`` with running and just-deleted shares: what is left, the running pods'
   Events; then ``helm install`` over an uninstall killed midway.
7. downgrade this tree -> previous release.

The previous release is ``e2e.kind.releases.PREVIOUS_RELEASE``, built from its own commit.
Brings kind up and down itself unless ``--reuse`` (a cluster ``python -m e2e.kind up`` made).
Needs root; run under ``flock /tmp/vgpu-node-tier.lock`` (the Makefile does). Prints the table
and writes it to ``--out`` (markdown).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import secrets
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.day2_load import (
    CREATED,
    Load,
    Outcome,
    RawApi,
    counts,
    create_once,
    first_details,
    running,
)
from e2e.cluster.settings import Settings
from e2e.kind import day2
from e2e.kind.cluster import GPU_NODE_LABEL, NAMESPACE, RELEASE, Kind, down, load_images, up
from e2e.kind.releases import Release, load_into_kind, previous_release
from e2e.kind.steps import run
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi, KubeError

Json = dict[str, Any]
LOAD_NAMESPACES = ("day2-load-a", "day2-load-b", "day2-load-c")
QUOTA_MIB = 1000  # each quota-test pod asks this much gpumem


@dataclass(frozen=True)
class Row:
    scenario: str
    figure: str
    value: str
    goal: str = ""


@dataclass
class Day2:
    kind: Kind
    api: KubeApi
    raw: RawApi
    release: Release
    workers: list[str]
    rate: float
    baseline: bool = False  # "this tree" is the previous release too: its figures, for comparison
    rows: list[Row] = field(default_factory=list)

    def row(self, scenario: str, figure: str, value: object, goal: str = "") -> None:
        self.rows.append(Row(scenario, figure, str(value), goal))
        print(f"[{scenario}] {figure}: {value}" + (f" (goal {goal})" if goal else ""), flush=True)

    def load(self) -> Load:
        raw = self.raw
        return Load(lambda ns, name: create_once(raw, ns, name), list(LOAD_NAMESPACES), self.rate)

    def install_previous(self) -> None:
        day2.install_chart(self.kind, self.release.chart, *self.release.helm_values())
        wait_webhook(self.api, 2)

    def install_current(self, *, wait: bool = True) -> None:
        """This tree's chart and images (the previous release's with ``--baseline``)."""
        if self.baseline:
            day2.install_chart(
                self.kind, self.release.chart, *self.release.helm_values(), wait=wait
            )
        else:
            day2.install_chart(self.kind, wait=wait)
        if wait:
            wait_webhook(self.api, 2)


# --- small helpers -------------------------------------------------------------------------------


def wait_webhook(api: KubeApi, replicas: int, timeout_s: float = 300) -> None:
    wait_for(
        lambda: day2.webhook_ready_endpoints(api) >= replicas,
        timeout_s=timeout_s,
        what=f"{replicas} webhook endpoints Ready",
        interval_s=1,
    )


def wait_old_replicas_gone(api: KubeApi) -> None:
    """Only the webhook's new replicas left: the old ones' drain and exit are over."""
    wait_for(
        lambda: len(day2.pods(api, day2.WEBHOOK)) == 2,
        timeout_s=300,
        what="the old webhook replicas gone",
        interval_s=0.5,
    )


def restarted_ready(api: KubeApi, name: str, restarts_before: int) -> float | None:
    """The time once the chart pod ``name`` has restarted a container and is Ready again."""
    found = get_pod(api, NAMESPACE, name)
    statuses = found.get("status", {}).get("containerStatuses") or []
    restarted = sum(int(s.get("restartCount", 0)) for s in statuses) > restarts_before
    return time.monotonic() if restarted and day2.ready(found) else None


def timeline(api: KubeApi, namespace: str, node: str) -> list[str]:
    """The namespace's and the node's Events in time order (where a reboot's time goes)."""
    items = api.list(f"/api/v1/namespaces/{namespace}/events")["items"]
    items += [
        e
        for e in api.list("/api/v1/namespaces/default/events")["items"]
        if e["involvedObject"].get("name") == node
    ]
    stamped = [
        (
            str(e.get("lastTimestamp") or e.get("eventTime") or ""),
            f"{e['involvedObject'].get('name')}: {e.get('reason')}: {e.get('message', '')!s:.120}",
        )
        for e in items
    ]
    first = min((when for when, what in stamped if not what.startswith(node)), default="")
    return [f"{when} {what}" for when, what in sorted(stamped) if when >= first]


def fresh_namespace(api: KubeApi, prefix: str) -> str:
    name = f"{prefix}-{secrets.token_hex(2)}"
    api.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


def share_pod(name: str, node: str | None, gpumem: int = 2000) -> Json:
    """A share that runs (restartPolicy Always: a rebooted node starts it again)."""
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": gpumem, "nvidia.com/gpucores": 10}
    container = {
        "name": "main",
        "image": "ubuntu:24.04",
        "imagePullPolicy": "Never",
        "command": ["sleep", "infinity"],
        "resources": {"limits": limits},
    }
    spec: Json = {"terminationGracePeriodSeconds": 1, "containers": [container]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create_admitted(api: KubeApi, namespace: str, body: Json, timeout_s: float = 60) -> Json:
    """Create, trying again while the webhook is unreachable (not what is measured here)."""

    def attempt() -> Json | None:
        try:
            created: Json = api.create(f"/api/v1/namespaces/{namespace}/pods", body)
        except KubeError as error:
            if error.status == 409:
                found: Json = api.get(
                    f"/api/v1/namespaces/{namespace}/pods/{body['metadata']['name']}"
                )
                return found
            if error.status >= 500:
                return None
            raise
        return created

    return wait_for(
        attempt, timeout_s=timeout_s, what=f"{body['metadata']['name']} admitted", interval_s=1
    )


def get_pod(api: KubeApi, namespace: str, name: str) -> Json:
    found: Json = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return found


def running_ready(api: KubeApi, namespace: str, name: str) -> bool:
    found = get_pod(api, namespace, name)
    return found.get("status", {}).get("phase") == "Running" and day2.ready(found)


def wait_running(api: KubeApi, namespace: str, names: list[str], timeout_s: float = 240) -> float:
    started = time.monotonic()
    for name in names:
        probe = functools.partial(running_ready, api, namespace, name)
        wait_for(probe, timeout_s=timeout_s, what=f"{name} Running", interval_s=1)
    return round(time.monotonic() - started, 1)


def restarts(api: KubeApi, namespace: str, name: str) -> int:
    statuses = get_pod(api, namespace, name).get("status", {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount", 0)) for s in statuses)


def started_at(api: KubeApi, namespace: str, name: str) -> list[str]:
    """When each container of the pod last started ("" for one not running)."""
    statuses = get_pod(api, namespace, name).get("status", {}).get("containerStatuses") or []
    return [str(s.get("state", {}).get("running", {}).get("startedAt", "")) for s in statuses]


def started_again(api: KubeApi, namespace: str, name: str, before: list[str]) -> bool:
    now = started_at(api, namespace, name)
    return all(now) and now != before and running_ready(api, namespace, name)


def container_state(api: KubeApi, namespace: str, name: str) -> str:
    statuses = get_pod(api, namespace, name).get("status", {}).get("containerStatuses") or []
    return "; ".join(f"{s.get('state')} restarts {s.get('restartCount')}" for s in statuses)[:300]


def claim_uids(api: KubeApi, namespace: str, name: str) -> list[str]:
    found = []
    for status in (
        get_pod(api, namespace, name).get("status", {}).get("resourceClaimStatuses") or []
    ):
        claim = api.get(
            f"{day2.RESOURCE}/namespaces/{namespace}/resourceclaims/{status['resourceClaimName']}"
        )
        found.append(str(claim["metadata"]["uid"]))
    return found


def pod_names(api: KubeApi, namespace: str) -> list[str]:
    return [
        i["metadata"]["name"] for i in api.list(f"/api/v1/namespaces/{namespace}/pods")["items"]
    ]


def wait_gone(api: KubeApi, namespace: str, names: list[str], timeout_s: float = 180) -> None:
    wait_for(
        lambda: not set(names) & set(pod_names(api, namespace)),
        timeout_s=timeout_s,
        what=f"{', '.join(names)} gone",
        interval_s=1,
    )


def claim_count(api: KubeApi, namespace: str) -> int:
    return len(api.list(f"{day2.RESOURCE}/namespaces/{namespace}/resourceclaims")["items"])


def wait_claims(api: KubeApi, namespace: str, count: int) -> None:
    wait_for(
        lambda: claim_count(api, namespace) >= count,
        timeout_s=60,
        what=f"{count} claims in {namespace}",
        interval_s=0.5,
    )


def delete_namespace(api: KubeApi, namespace: str, *, wait_s: float = 180) -> None:
    """Delete the namespace's pods (grace 0) and the namespace; wait until it is gone."""
    for item in api.list(f"/api/v1/namespaces/{namespace}/pods")["items"]:
        path = f"/api/v1/namespaces/{namespace}/pods/{item['metadata']['name']}"
        with contextlib.suppress(KubeError):
            api.request("DELETE", path, body={"gracePeriodSeconds": 0})
    try:
        api.delete(f"/api/v1/namespaces/{namespace}")
    except KubeError:
        return

    def gone() -> bool:
        try:
            api.get(f"/api/v1/namespaces/{namespace}")
        except KubeError as error:
            return error.status == 404
        return False

    try:
        wait_for(gone, timeout_s=wait_s, what=f"namespace {namespace} gone", interval_s=2)
    except AssertionError as error:
        print(f"warning: {error}", flush=True)


def warning_events(api: KubeApi, namespace: str, name: str = "") -> list[str]:
    items = api.list(f"/api/v1/namespaces/{namespace}/events")["items"]
    return [
        f"{e['involvedObject'].get('name')}: {e.get('reason')}: {e.get('message', '')[:200]}"
        for e in items
        if e.get("type") == "Warning" and (not name or e["involvedObject"].get("name") == name)
    ]


def same_files(before: dict[str, str], after: dict[str, str]) -> int:
    """How many of ``before``'s files have the same hash ``after``."""
    return sum(1 for path, digest in before.items() if after.get(path) == digest)


def file_differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Each of ``before``'s files that is gone or changed ``after``, said so."""
    return [
        f"{path} {'gone' if path not in after else 'changed'}"
        for path, digest in sorted(before.items())
        if after.get(path) != digest
    ]


def outcome_summary(load_counts: dict[str, int]) -> str:
    parts = [f"{k} {v}" for k, v in sorted(load_counts.items())]
    return ", ".join(parts) or "none"


def failed(load_counts: dict[str, int]) -> int:
    return sum(v for k, v in load_counts.items() if k != CREATED)


# --- the scenarios -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roll:
    """One webhook roll under the load: every outcome, and when (load seconds) the roll began,
    its command returned, and the old replicas were gone."""

    outcomes: list[Outcome]
    began: float
    commanded: float
    ended: float


def roll_under_load(ctx: Day2, command: Callable[[], None]) -> Roll:
    """`command` (a roll of the webhook) under the load: 5 s of load before it, until the old
    replicas are gone (they drain after the command is satisfied), and 5 s after."""
    load = ctx.load()
    with running(load):
        time.sleep(5)
        began = load.now_s()
        command()
        commanded = load.now_s()
        wait_old_replicas_gone(ctx.api)
        ended = load.now_s()
        time.sleep(5)
    return Roll(load.stop(), began, commanded, ended)


def roll_rows(ctx: Day2, name: str, roll: Roll) -> None:
    """The creates due during the roll (and 5 s after), and how they went (goal: all created)."""
    window = counts(roll.outcomes, roll.began, roll.ended + 5)
    ctx.row(name, f"creates due during the roll (+5 s) at {ctx.rate:g}/s", sum(window.values()))
    ctx.row(
        name,
        "refused / timed out / other during the roll",
        outcome_summary(window),
        "0 not created",
    )


def webhook_upgrade(ctx: Day2) -> None:
    """1. helm upgrade previous -> this tree while creates arrive at ctx.rate."""
    name = "1 webhook upgrade"
    ctx.install_previous()
    roll = roll_under_load(ctx, ctx.install_current)
    ctx.row(name, "helm upgrade --wait took", f"{roll.commanded - roll.began:.1f} s")
    ctx.row(name, "until the old replicas were gone", f"{roll.ended - roll.began:.1f} s")
    roll_rows(ctx, name, roll)
    ctx.row(name, "not created, whole run", failed(counts(roll.outcomes)))
    for detail in first_details(roll.outcomes):
        ctx.row(name, "a refusal said", detail)
    webhook_roll_of_this_tree(ctx)


def webhook_roll_of_this_tree(ctx: Day2) -> None:
    """1b. the roll every later upgrade is: replicas of this tree (which drain) replaced under
    load; the upgrade from the previous release stops replicas of that release, which do not."""
    name = "1b webhook roll, this tree -> this tree"
    deployment = f"deployment/{RELEASE}-webhook"

    def restart() -> None:
        run([*ctx.kind.kubectl, "-n", NAMESPACE, "rollout", "restart", deployment])
        run([*ctx.kind.kubectl, "-n", NAMESPACE, "rollout", "status", deployment])

    roll = roll_under_load(ctx, restart)
    ctx.row(name, "rollout restart until the old replicas were gone",
            f"{roll.ended - roll.began:.1f} s")  # fmt: skip
    roll_rows(ctx, name, roll)
    for detail in first_details([o for o in roll.outcomes if o.due_s >= roll.began]):
        ctx.row(name, "a refusal said", detail)


def agent_upgrade(ctx: Day2) -> None:
    """2. agent rolling upgrade (previous -> this tree) on a node with running shares."""
    name = "2 agent upgrade"
    api, node = ctx.api, ctx.workers[0]
    ctx.install_previous()
    namespace = fresh_namespace(api, "day2-agent")
    try:
        keep = ["keep-0", "keep-1"]
        for pod in keep:
            create_admitted(api, namespace, share_pod(pod, node))
        wait_running(api, namespace, keep)
        uids = {pod: claim_uids(api, namespace, pod) for pod in keep}
        before = day2.share_file_hashes(node)
        mine = {p: d for p, d in before.items() if any(u in p for us in uids.values() for u in us)}
        old_agent = day2.agent_on(api, node)
        assert old_agent is not None
        day2.install_chart(ctx.kind, wait=False)
        during: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            agent = day2.agent_on(api, node)
            replaced = agent is None or agent["metadata"]["uid"] != old_agent["metadata"]["uid"]
            terminating = agent is not None and agent["metadata"].get("deletionTimestamp")
            if replaced or terminating:
                pod = f"during-{len(during)}"
                create_admitted(api, namespace, share_pod(pod, node, gpumem=1000))
                during.append(pod)
                if len(during) == 5:
                    break
            time.sleep(1)
        day2.wait_agent_ready(api, node, not_uid=old_agent["metadata"]["uid"])
        not_running = []
        for pod in during:
            try:
                wait_running(api, namespace, [pod], timeout_s=240)
            except AssertionError:
                not_running.append(pod)
        surfaced = [e for e in warning_events(api, namespace) if "during-" in e]
        ctx.row(name, "pods created while the agent restarted", len(during))
        ctx.row(name, "of them not Running in 240 s (pods failed)", len(not_running), "0")
        ctx.row(name, "Warning events on them (Prepare errors surfaced)", len(surfaced))
        for event in surfaced[:3]:
            ctx.row(name, "an event said", event)
        after = day2.share_file_hashes(node)
        changed = [p for p, d in mine.items() if after.get(p) != d]
        ctx.row(
            name,
            "restartCount of the pre-upgrade pods",
            [restarts(api, namespace, p) for p in keep],
            "0",
        )
        ctx.row(
            name,
            "their CDI specs + limits files changed or gone",
            f"{len(changed)} of {len(mine)}",
            "0",
        )
        for pod in keep:
            api.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}")
        wait_gone(api, namespace, keep)
        left = [
            p for p in day2.ours_on_node(node) if any(u in p for us in uids.values() for u in us)
        ]
        left += [p for p in day2.share_file_hashes(node) if p in mine]
        ctx.row(
            name, "files of pre-upgrade claims left after Unprepare", sorted(set(left)) or 0, "0"
        )
    finally:
        delete_namespace(api, namespace)
        day2.install_chart(ctx.kind)


def quota_decisions(ctx: Day2, namespace: str, hard_mib: int) -> tuple[int, int]:
    """Create pods of QUOTA_MIB one by one; each admission compared with what a fresh list of
    the namespace's claims and its quota says. (agreeing, disagreeing)."""
    api = ctx.api
    agree = disagree = 0
    for index in range(hard_mib // QUOTA_MIB + 1):
        claims = api.list(f"{day2.RESOURCE}/namespaces/{namespace}/resourceclaims")["items"]
        allowed = (len(claims) + 1) * QUOTA_MIB <= hard_mib
        body = share_pod(f"q-{index}-{secrets.token_hex(2)}", None, gpumem=QUOTA_MIB)
        body["spec"]["nodeSelector"] = {"vgpu-bridge.io/day2-load": "nowhere"}
        status, text = ctx.raw.send("POST", f"/api/v1/namespaces/{namespace}/pods", body)
        admitted = status == 201
        if admitted == allowed:
            agree += 1
        else:
            disagree += 1
            print(f"quota: admitted={admitted} fresh list says {allowed}: {text[:600]}", flush=True)
        if admitted:  # its claim exists before the next decision
            wait_claims(api, namespace, len(claims) + 1)
    return agree, disagree


def quota_seen_s(ctx: Day2, namespace: str, timeout_s: float = 180) -> float:
    """Seconds until a QUOTA_MIB pod is admitted in ``namespace`` (tried every 0.5 s; the pod
    admitted is deleted again)."""
    started = time.monotonic()

    def admitted() -> bool:
        body = share_pod(f"seen-{secrets.token_hex(3)}", None, gpumem=QUOTA_MIB)
        body["spec"]["nodeSelector"] = {"vgpu-bridge.io/day2-load": "nowhere"}
        path = f"/api/v1/namespaces/{namespace}/pods"
        status, _ = ctx.raw.send("POST", path, body)
        if status == 201:
            ctx.raw.send("DELETE", f"{path}/{body['metadata']['name']}", {"gracePeriodSeconds": 0})
        return status == 201

    wait_for(
        admitted, timeout_s=timeout_s, what="a pod admitted under the raised quota", interval_s=0.5
    )
    return time.monotonic() - started


def quota(api: KubeApi, namespace: str, hard_mib: int) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpumem"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": str(hard_mib)}},
    }
    path = f"/api/v1/namespaces/{namespace}/resourcequotas"
    try:
        api.create(path, body)
    except KubeError as error:
        if error.status != 409:
            raise
        api.merge_patch(f"{path}/gpumem", {"spec": body["spec"]})


def apiserver_outage(ctx: Day2) -> None:
    """3. API server stopped 30 s under load; then etcd paused in bursts."""
    name = "3 API outage"
    ctx.install_current()
    api = ctx.api
    quick = KubeApi.connect(str(ctx.kind.kubeconfig), timeout_s=3)
    namespace = fresh_namespace(api, "day2-quota")
    quota(api, namespace, 2 * QUOTA_MIB)
    for index in range(2):
        body = share_pod(f"booked-{index}", None, gpumem=QUOTA_MIB)
        body["spec"]["nodeSelector"] = {"vgpu-bridge.io/day2-load": "nowhere"}
        create_admitted(api, namespace, body)
    restarts_before = day2.restart_counts(api)
    quota(api, namespace, 3 * QUOTA_MIB)  # the same change, no outage: how soon it is seen
    ctx.row(
        name,
        "a quota raised, no outage: admitted by the webhook after",
        f"{quota_seen_s(ctx, namespace):.1f} s",
    )
    quota(api, namespace, 2 * QUOTA_MIB)
    load = ctx.load()
    try:
        with running(load):
            time.sleep(5)
            with day2.apiserver_stopped(ctx.kind, quick) as times:
                time.sleep(30)
            back = load.now_s() - (time.monotonic() - times["back"])
            # the quota grows while the webhook's watches are still catching up
            quota(api, namespace, 6 * QUOTA_MIB)
            admitted_at = wait_for(
                lambda: (
                    time.monotonic()
                    if create_once(ctx.raw, LOAD_NAMESPACES[0], f"probe-{secrets.token_hex(3)}")[0]
                    == CREATED
                    else None
                ),
                timeout_s=300,
                what="a create admitted after the return",
                interval_s=0.5,
            )
            raised = time.monotonic()
            agree, disagree = quota_decisions(ctx, namespace, 6 * QUOTA_MIB)
            if disagree:
                seen = quota_seen_s(ctx, namespace) + (time.monotonic() - raised)
                ctx.row(name, "the raised quota admitted by the webhook after", f"{seen:.1f} s")
            time.sleep(max(0.0, 30 - (time.monotonic() - times["back"])))
        outcomes = load.stop()
        down_s = times["back"] - times["down"]
        ctx.row(
            name,
            "API server unreachable (manifest out 30 s, kubelet stop/start)",
            f"{down_s:.0f} s",
        )
        ctx.row(name, "API back -> webhook admits again", f"{admitted_at - times['back']:.1f} s")
        after = counts(outcomes, back)
        ctx.row(name, "creates after the return: outcomes", outcome_summary(after))
        ctx.row(name, "not created after the return", failed(after), "0 once the webhook is Ready")
        ctx.row(
            name,
            "quota decisions after the return agreeing with a fresh list",
            f"{agree} of {agree + disagree}",
            "all",
        )
        slices = api.list(
            f"{day2.RESOURCE}/resourceslices", fieldSelector=f"spec.driver={DEFAULT.driver}"
        )["items"]
        ctx.row(
            name,
            "our slices present after the return (nodes)",
            sorted({s["spec"]["nodeName"] for s in slices}),
        )
        grown = {p: n - restarts_before.get(p, 0) for p, n in day2.restart_counts(api).items()}
        ctx.row(name, "chart pods' container restarts during the outage", grown, "no crash loop")
        etcd_slow(ctx)
    finally:
        delete_namespace(api, namespace)


def etcd_slow(ctx: Day2) -> None:
    """etcd SIGSTOPped 3 s, running 2 s, five times, under load: outcomes, restarts."""
    name = "3 etcd slow"
    before = day2.restart_counts(ctx.api)
    load = ctx.load()
    with running(load):
        time.sleep(3)
        began = load.now_s()
        for _ in range(5):
            day2.etcd_pause(ctx.kind, 3)
            time.sleep(2)
        ended = load.now_s()
        time.sleep(15)
    outcomes = load.stop()
    ctx.row(
        name,
        "etcd paused (SIGSTOP) 5 x 3 s, 2 s apart: creates outcomes",
        outcome_summary(counts(outcomes, began, ended)),
    )
    ctx.row(name, "in the 15 s after", outcome_summary(counts(outcomes, ended)), "all created")
    for detail in first_details([o for o in outcomes if o.due_s >= began]):
        ctx.row(name, "a failed create said", detail)
    grown = {p: n - before.get(p, 0) for p, n in day2.restart_counts(ctx.api).items()}
    ctx.row(name, "chart pods' container restarts", grown, "no crash loop")


def node_reboot(ctx: Day2) -> None:
    """4. a GPU worker restarted (its /run cleared), a pod deleted while it was down."""
    name = "4 node reboot"
    ctx.install_current()
    api, node = ctx.api, ctx.workers[0]
    namespace = fresh_namespace(api, "day2-reboot")
    try:
        keep, gone = ["keep-0", "keep-1"], "gone"
        for pod in [*keep, gone]:
            create_admitted(api, namespace, share_pod(pod, node))
        wait_running(api, namespace, [*keep, gone])
        keep_uids = [u for p in keep for u in claim_uids(api, namespace, p)]
        gone_uids = claim_uids(api, namespace, gone)
        before = day2.share_file_hashes(node)
        kept = {p: d for p, d in before.items() if any(u in p for u in keep_uids)}
        address = day2.node_address(node)
        first_start = {p: started_at(api, namespace, p) for p in keep}
        started = time.monotonic()
        day2.run_docker("stop", node)
        api.delete(f"/api/v1/namespaces/{namespace}/pods/{gone}")
        day2.run_docker("start", node)
        day2.rewire(api)
        ctx.row(name, "node address kept", f"{address} -> {day2.node_address(node)}", "same")
        try:
            for pod in keep:  # Running again means a container started after the reboot
                wait_for(
                    functools.partial(started_again, api, namespace, pod, first_start[pod]),
                    timeout_s=300,
                    what=f"{pod} started again and Ready",
                    interval_s=1,
                )
            ctx.row(name, "stop -> pods Running again", f"{time.monotonic() - started:.0f} s")
            for line in timeline(api, namespace, node):
                print(f"reboot timeline: {line}", flush=True)
        except AssertionError as error:
            ctx.row(name, "pods Running again", f"no: {error}", "yes")
            for pod in keep:
                ctx.row(name, f"{pod} state", container_state(api, namespace, pod))
            ctx.row(name, "warning events", warning_events(api, namespace)[-3:])
        after = day2.share_file_hashes(node)
        ctx.row(
            name,
            "CDI specs + limits files of running pods identical",
            f"{same_files(kept, after)} of {len(kept)}",
            "all",
        )
        differ = file_differences(kept, after)
        if differ:
            ctx.row(name, "files not identical", differ)
        try:
            wait_for(
                lambda: (
                    not any(
                        gone == i["metadata"]["name"]
                        for i in api.list(f"/api/v1/namespaces/{namespace}/pods")["items"]
                    )
                ),
                timeout_s=120,
                what="the deleted pod gone",
                interval_s=1,
            )
            left = [
                p for p in day2.ours_on_node(node) + list(after) if any(u in p for u in gone_uids)
            ]
            ctx.row(name, "files of the pod deleted while down, left", sorted(set(left)) or 0, "0")
        except AssertionError as error:
            ctx.row(name, "pod deleted while down", f"not gone: {error}")
        ctx.row(
            name,
            "restarts of the running pods' containers",
            [restarts(api, namespace, p) for p in keep],
            "the kubelet restarts them once",
        )
    finally:
        delete_namespace(api, namespace)


def webhook_sigkill(ctx: Day2) -> None:
    """5. SIGKILL of one webhook replica's process under load."""
    name = "5 webhook SIGKILL"
    ctx.install_current()
    load = ctx.load()
    with running(load):
        time.sleep(5)
        killed_at = load.now_s()
        before = day2.restart_counts(ctx.api)
        pod = day2.sigkill_one_webhook(ctx.api)
        killed = time.monotonic()
        back = wait_for(
            functools.partial(restarted_ready, ctx.api, pod, before.get(pod, 0)),
            timeout_s=120,
            what=f"{pod} restarted and Ready",
            interval_s=0.5,
        )
        time.sleep(max(0.0, 30 - (time.monotonic() - killed)))
    outcomes = load.stop()
    ctx.row(name, "SIGKILL -> the container restarted and Ready", f"{back - killed:.1f} s")
    window = counts(outcomes, killed_at, killed_at + 30)
    ctx.row(name, f"killed {pod}; creates in the 30 s after", sum(window.values()))
    ctx.row(
        name,
        "not created",
        outcome_summary({k: v for k, v in window.items() if k != CREATED}),
        "bounded",
    )
    for detail in first_details([o for o in outcomes if o.due_s >= killed_at]):
        ctx.row(name, "a refusal said", detail)
    wait_webhook(ctx.api, 2)


def uninstall(ctx: Day2) -> None:
    """6. helm uninstall with running and just-deleted shares; then install over a killed one."""
    name = "6 uninstall"
    api = ctx.api
    ctx.install_current()
    namespace = fresh_namespace(api, "day2-uninstall")
    try:
        running_pods = ["run-0", "run-1"]
        for pod, node in zip([*running_pods, "gone-0", "gone-1"], ctx.workers * 2, strict=True):
            create_admitted(api, namespace, share_pod(pod, node))
        wait_running(api, namespace, [*running_pods, "gone-0", "gone-1"])
        for pod in ("gone-0", "gone-1"):
            api.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}")
        started = time.monotonic()
        done = day2.uninstall(ctx.kind)
        ctx.row(
            name,
            "helm uninstall --wait",
            f"rc {done.returncode}, {time.monotonic() - started:.0f} s",
            "rc 0",
        )
        if done.returncode != 0:
            ctx.row(name, "helm said", done.stderr.strip()[-300:])
        try:  # the agents drain, clean their nodes and exit within their grace period
            wait_for(
                lambda: not day2.pods(api, "app.kubernetes.io/instance=" + RELEASE),
                timeout_s=240,
                what="the chart's pods gone",
                interval_s=1,
            )
            ctx.row(
                name, "uninstall -> the chart's pods gone", f"{time.monotonic() - started:.0f} s"
            )
        except AssertionError as error:
            ctx.row(name, "the chart's pods gone", f"no: {error}")

        def left_now() -> list[str]:
            """Ours, but claims of pods that still exist (the running ones', a load pod's)."""
            pods = {
                f"resourceclaims/{ns}/{c['metadata']['name']}"
                for ns in (namespace, *LOAD_NAMESPACES)
                for c in api.list(f"{day2.RESOURCE}/namespaces/{ns}/resourceclaims")["items"]
                if any(
                    o.get("name") in pod_names(api, ns)
                    for o in c["metadata"].get("ownerReferences") or []
                )
            }
            return [x for x in day2.ours_in_cluster(api) if x not in pods]

        try:  # the garbage collector; the kubelets drop a gone driver's slices after ~30 s
            wait_for(lambda: not left_now(), timeout_s=90, what="nothing left", interval_s=2)
            ctx.row(
                name,
                "uninstall -> nothing of ours left in the cluster",
                f"{time.monotonic() - started:.0f} s",
            )
        except AssertionError:
            pass
        left = left_now()
        ctx.row(name, "left in the cluster, but the running pods' claims", left or 0, "nothing")
        for node in ctx.workers:
            ctx.row(name, f"left on {node}", day2.ours_on_node(node) or 0, "nothing")
            ctx.row(name, f"empty mount dirs left on {node}", day2.empty_mount_dirs(node))
        events = [e for p in running_pods for e in warning_events(api, namespace, p)]
        ctx.row(name, "Warning events on the running pods", len(events), ">= 1 each")
        for event in events[:2]:
            ctx.row(name, "event", event)
        gone = [
            i["metadata"]["name"] for i in api.list(f"/api/v1/namespaces/{namespace}/pods")["items"]
        ]
        ctx.row(name, "pods left (just-deleted ones should be gone)", gone)
    finally:
        delete_namespace(api, namespace, wait_s=60)
    interrupted_uninstall(ctx)


def interrupted_uninstall(ctx: Day2) -> None:
    name = "6 uninstall"
    ctx.install_current()
    command = [
        str(ctx.kind.helm),
        "uninstall",
        RELEASE,
        "--namespace",
        NAMESPACE,
        "--wait",
        "--kubeconfig",
        str(ctx.kind.kubeconfig),
    ]
    helm = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    helm.send_signal(signal.SIGKILL)
    helm.wait()
    status = day2.helm(ctx.kind, "status", RELEASE, "--namespace", NAMESPACE, check=False)
    state = next((ln for ln in status.stdout.splitlines() if ln.startswith("STATUS")), "none")
    ctx.row(name, "helm uninstall killed after 2 s: release state", state)
    done = day2.install_chart(ctx.kind, check=False)
    ctx.row(name, "helm upgrade --install over it", f"rc {done.returncode}", "0")
    if done.returncode != 0:
        ctx.row(name, "helm said", done.stderr.strip()[-300:])
        again = day2.uninstall(ctx.kind)
        ctx.row(name, "helm uninstall again", f"rc {again.returncode}")
        if again.returncode != 0:
            again = day2.uninstall(ctx.kind, "--no-hooks")
            ctx.row(name, "helm uninstall --no-hooks", f"rc {again.returncode}")
        done = day2.install_chart(ctx.kind, check=False)
        ctx.row(name, "then helm upgrade --install", f"rc {done.returncode}")
    wait_webhook(ctx.api, 2)
    namespace = fresh_namespace(ctx.api, "day2-reinstall")
    try:
        create_admitted(ctx.api, namespace, share_pod("after", ctx.workers[0]))
        took = wait_running(ctx.api, namespace, ["after"])
        ctx.row(name, "a share runs after the reinstall", f"yes ({took:.0f} s)")
    except AssertionError as error:
        ctx.row(name, "a share runs after the reinstall", f"no: {error}")
    finally:
        delete_namespace(ctx.api, namespace)


def downgrade(ctx: Day2) -> None:
    """7. this tree -> previous release, with a running share."""
    name = "7 downgrade"
    api, node = ctx.api, ctx.workers[0]
    ctx.install_current()
    namespace = fresh_namespace(api, "day2-downgrade")
    try:
        create_admitted(api, namespace, share_pod("pre", node))
        wait_running(api, namespace, ["pre"])
        uids = claim_uids(api, namespace, "pre")
        before = {
            p: d for p, d in day2.share_file_hashes(node).items() if any(u in p for u in uids)
        }
        done = day2.install_chart(
            ctx.kind, ctx.release.chart, *ctx.release.helm_values(), check=False
        )
        ctx.row(
            name,
            "helm upgrade to the previous release",
            f"rc {done.returncode}",
            "0 or a clear refusal",
        )
        if done.returncode != 0:
            ctx.row(name, "helm said", done.stderr.strip()[-300:])
        wait_webhook(api, 2)
        day2.wait_agent_ready(api, node)
        create_admitted(api, namespace, share_pod("post", node))
        try:
            ctx.row(
                name,
                "a new share runs on the previous release",
                f"yes ({wait_running(api, namespace, ['post']):.0f} s)",
            )
        except AssertionError as error:
            ctx.row(name, "a new share runs on the previous release", f"no: {error}")
        after = day2.share_file_hashes(node)
        ctx.row(
            name,
            "pre-downgrade pod: restarts, files identical",
            f"{restarts(api, namespace, 'pre')}, {same_files(before, after)} of {len(before)}",
        )
        api.delete(f"/api/v1/namespaces/{namespace}/pods/pre")
        wait_for(
            lambda: (
                not any(
                    i["metadata"]["name"] == "pre"
                    for i in api.list(f"/api/v1/namespaces/{namespace}/pods")["items"]
                )
            ),
            timeout_s=180,
            what="pre gone",
            interval_s=1,
        )
        left = [
            p
            for p in day2.ours_on_node(node) + list(day2.share_file_hashes(node))
            if any(u in p for u in uids)
        ]
        ctx.row(
            name,
            "files of the pre-downgrade claim left after Unprepare",
            sorted(set(left)) or 0,
            "0",
        )
    finally:
        delete_namespace(api, namespace)
        ctx.install_current()


SCENARIOS: dict[str, Callable[[Day2], None]] = {
    "1": webhook_upgrade,
    "5": webhook_sigkill,
    "3": apiserver_outage,
    "4": node_reboot,
    "2": agent_upgrade,
    "7": downgrade,
    "6": uninstall,
}


# --- the run -------------------------------------------------------------------------------------


def table(rows: list[Row]) -> str:
    lines = ["| scenario | figure | value | goal |", "| --- | --- | --- | --- |"]
    for r in rows:
        value = r.value.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r.scenario} | {r.figure} | {value} | {r.goal} |")
    return "\n".join(lines)


def run_scenarios(ctx: Day2, chosen: list[str]) -> None:
    for key, scenario in SCENARIOS.items():
        if key not in chosen:
            continue
        started = time.monotonic()
        try:
            scenario(ctx)
        except Exception as error:
            traceback.print_exc()
            ctx.row(
                f"{key} {scenario.__name__}",
                "FAILED",
                f"{type(error).__name__}: {str(error)[:300]}",
            )
        ctx.row(
            f"{key} {scenario.__name__}", "scenario took", f"{time.monotonic() - started:.0f} s"
        )


def measure(kind: Kind, chosen: list[str], rate: float, *, baseline: bool) -> Day2:
    """The previous release built and loaded, the load's namespaces, the chosen scenarios."""
    release = previous_release(kind.settings)
    load_into_kind(kind.kind_binary, kind.name, release)
    api = KubeApi.connect(str(kind.kubeconfig), timeout_s=30)
    for namespace in LOAD_NAMESPACES:
        try:
            api.create(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
        except KubeError as error:
            if error.status != 409:
                raise
    workers = sorted(
        n["metadata"]["name"]
        for n in api.list("/api/v1/nodes", labelSelector=GPU_NODE_LABEL)["items"]
    )
    ctx = Day2(kind, api, RawApi(str(kind.kubeconfig)), release, workers, rate, baseline)
    run_scenarios(ctx, chosen)
    for namespace in LOAD_NAMESPACES:
        delete_namespace(api, namespace)
    return ctx


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", action="store_true", help="use the running kind cluster")
    parser.add_argument(
        "--rebuild", action="store_true", help="with --reuse: build and load this tree's images"
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="install the previous release where the scenarios install this tree",
    )
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--only", default=",".join(SCENARIOS), help="e.g. 1,5")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--label", default="", help="a line said above the table")
    args = parser.parse_args()
    settings = Settings.from_env()
    kind = Kind.from_settings(settings)
    began = time.monotonic()
    try:
        if not args.reuse:
            up(kind)
        elif args.rebuild:
            load_images(kind)
            if day2.installed(kind):  # same tag: the pods restart to run the images built now
                day2.roll_chart_pods(kind)
        ctx = measure(kind, args.only.split(","), args.rate, baseline=args.baseline)
    finally:
        if not args.reuse:
            down(kind)
    head = (
        f"day two on kind, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, load "
        f"{args.rate:g} creates/s over {len(LOAD_NAMESPACES)} namespaces, previous release "
        f"{ctx.release.commit}, {time.monotonic() - began:.0f} s in all. {args.label}"
    )
    text = f"{head}\n\n{table(ctx.rows)}\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as out:
            out.write(text + "\n")
    return 1 if any(row.figure == "FAILED" for row in ctx.rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
