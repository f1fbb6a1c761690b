"""Part 3, the rest: the template sweeper's first pass and the memory of the template index.

Setup, on a private control plane: `templates` ResourceClaimTemplates of ours (labelled and
stamped ``last-admitted`` as the webhook's ``TemplateStore`` makes them, each a distinct share,
so a distinct hashed name) spread evenly over `namespaces` namespaces; the first
`referenced` fraction of them (every namespace gets its part) is named by a Pod (no scheduler
takes it: ``schedulerName`` is one that does not run) or a Deployment of 0 replicas, one each,
alternately; the rest is named by nothing. Creating them is not measured.

Then the real webhook (``vgpu-bridge webhook`` with the command line ``replica_start`` uses; the
sweep settings as env vars, as the chart sets them) is started three times:

1. before the templates exist: its RSS 2 s after its template index has listed (none);
2. with them, and a grace no template reaches (1e6 s): its RSS 2 s after its template index has
   listed them (its watch on templates is open: ``apiserver_longrunning_requests``), and its
   peak (VmHWM). The growth per 1,000 templates over start 1 is what listing them leaves held:
   the index's entries, and what parsing two full lists (the index's, and the first sweep pass's,
   which keeps nothing here) left in the allocator; the restorer holds nothing while no template
   is deleted. This start's requests are the baseline of the next;
3. with a grace of 1 s, every template created at least 2 s before (its ``last-admitted`` stamp
   is its creation time, so nothing is back-dated): the first sweep pass, which runs as soon as
   the webhook's API threads start, is timed from ready (/readyz 200: the threads start together
   just before, the slice cache lists first) to the timestamp of the line the pass logs at its
   end. Then, once the namespaced pod LISTs have stopped for ``QUIET_S`` (the restorer checks
   every deletion its watch reports, one pass of namespaced LISTs per namespace and batch), the
   templates left are counted, the requests read, and the memory (the peak now includes the
   pass's list and the restorer's queue of deleted templates).

RSS is the webhook process's own VmRSS (the index and the restorer live there), with the figure
``replica_start`` gives (with the prevalidating child) beside it. LISTs of kinds whose API is
not installed (Volcano's Job, the default extra workload kinds) answer 404 and are not in the
API server's count; the footer of the table counts them from the code's own lists.

Checked, not only printed: the templates deleted (from the pass's line) and kept (listed after)
must be the unreferenced and referenced counts, and none restored; a mismatch is flagged.

``python -m bench.scaling.lifecycle [--templates 10000] [--namespaces 100] [--referenced 0.3]``
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.scaling.api_counts import RequestKind, Requests, counted, request_totals
from bench.scaling.bulk import CLIENT_THREADS, ApiConnection, in_threads
from bench.scaling.replica_start import running_replica
from bench.scaling.viewer import pages
from bench.webhook import rss_mb
from e2e.cluster import KubeClient, LocalCluster, Settings, running_cluster
from e2e.cluster.client import Json
from e2e.webhook.process import WebhookProcess
from vgpu_bridge.core import DEFAULT, DeviceFilter, GpuRequest, Inventory
from vgpu_bridge.core.claims import claim_spec, claim_template, template_name
from vgpu_bridge.core.models import Problems
from vgpu_bridge.webhook.extra_workloads import (
    DEFAULT_EXTRA_WORKLOAD_RESOURCES,
    parse_extra_resources,
)
from vgpu_bridge.webhook.templates import LAST_ADMITTED, OURS, REFERRERS, templates_path

NAMESPACE_PREFIX = "lifecycle-"
NO_SCHEDULER = "lifecycle-bench-none"  # pods that no scheduler takes: nothing moves them
HOLD_GRACE_S, SWEEP_GRACE_S, INTERVAL_S = 1_000_000, 1, 3600  # one pass in each start
READY_TIMEOUT_S, POLL_S, SETTLE_S, QUIET_S = 120.0, 0.02, 2.0, 3.0
SWEPT, RESTORED = "swept unused claim templates", "restored deleted claim templates still in use"
QUEUE_FULL = "too many deleted templates queued; not checking this one"
EXTRA_KINDS = parse_extra_resources(DEFAULT_EXTRA_WORKLOAD_RESOURCES)  # the webhook's default
_WATCHES = re.compile(r"^apiserver_longrunning_requests\{([^}]*)\} (\S+)$", re.MULTILINE)


@dataclass(frozen=True)
class Layout:
    """Which templates exist where, and which are named by something."""

    templates: int
    namespaces: int
    referenced: int

    def namespace(self, index: int) -> str:
        return f"{NAMESPACE_PREFIX}{index % self.namespaces:03d}"

    def namespace_names(self) -> list[str]:
        return [self.namespace(i) for i in range(min(self.templates, self.namespaces))]


def share(index: int) -> Json:
    """The claim spec the translator writes for a share of 1 GiB + `index` MiB: one per index."""
    problems = Problems()
    spec = claim_spec(GpuRequest(count=1, memory_mib=1024 + index, cores=10), DeviceFilter(),
                      profile=DEFAULT, inventory=Inventory(), percent_path="-",
                      problems=problems)  # fmt: skip
    if spec is None:
        raise ValueError(f"no claim spec for share {index}: {problems.errors}")
    return spec


def template_body(index: int) -> Json:
    """Template `index` as ``TemplateStore`` creates it: labelled ours, stamped admitted now."""
    spec = share(index)
    body = claim_template(spec, name=template_name(spec), namespace=None)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body["metadata"]["annotations"] = {LAST_ADMITTED: stamp}
    return body


def referrer(index: int, template: str) -> tuple[str, Json]:
    """The API collection and body of the Pod (even `index`) or 0-replica Deployment (odd) that
    names `template`."""
    pod_spec = {
        "schedulerName": NO_SCHEDULER,
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        "containers": [{"name": "main", "image": "cuda:12",
                        "resources": {"claims": [{"name": "gpu"}]}}],
    }  # fmt: skip
    name = f"holder-{index}"
    if index % 2 == 0:
        return "pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                        "spec": pod_spec}  # fmt: skip
    labels = {"app": name}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": pod_spec}},
    }  # fmt: skip
    return "deployments", deployment


def create_namespaces(kube: KubeClient, layout: Layout) -> None:
    for name in layout.namespace_names():
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        kube.create("/api/v1/namespaces", body)


def create_referrers(kube: KubeClient, layout: Layout, *, threads: int) -> None:
    """One Pod or Deployment per referenced template; then wait until the claim controller has
    made each pod's claim, so that it is not at work while the webhook is measured."""

    def create(connection: ApiConnection, index: int) -> None:
        collection, body = referrer(index, template_body(index)["metadata"]["name"])
        prefix = "/api/v1" if collection == "pods" else "/apis/apps/v1"
        connection.send("POST", f"{prefix}/namespaces/{layout.namespace(index)}/{collection}", body)

    in_threads(kube, range(layout.referenced), create, threads=threads)
    pods = math.ceil(layout.referenced / 2)
    deadline = time.monotonic() + READY_TIMEOUT_S + layout.referenced * 0.05

    def claims() -> int:
        return sum(len(kube.items(f"/apis/resource.k8s.io/v1/namespaces/{name}/resourceclaims"))
                   for name in layout.namespace_names())  # fmt: skip

    while claims() < pods:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the claim controller did not make {pods} pods' claims")
        time.sleep(1.0)


def create_templates(kube: KubeClient, layout: Layout, *, threads: int) -> float:
    """Create every template; returns the wall-clock time the last one was created."""

    def create(connection: ApiConnection, index: int) -> None:
        connection.send("POST", templates_path(layout.namespace(index)), template_body(index))

    in_threads(kube, range(layout.templates), create, threads=threads)
    return time.time()


@dataclass(frozen=True)
class Memory:
    rss_mb: float  # VmRSS of the webhook process (where the index and the restorer live)
    peak_mb: float  # its VmHWM: the most it has held
    with_child_mb: float  # the replica's RSS with its prevalidating child, as replica_start's

    def __str__(self) -> str:
        return (f"{self.rss_mb:.1f} MB (peak {self.peak_mb:.1f}; "
                f"{self.with_child_mb:.1f} with its child)")  # fmt: skip


def memory(pid: int) -> Memory:
    status = Path(f"/proc/{pid}/status").read_text()
    rss, peak = (re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
                 for field in ("VmRSS", "VmHWM"))  # fmt: skip
    if rss is None or peak is None:
        raise RuntimeError(f"no VmRSS/VmHWM in /proc/{pid}/status")
    return Memory(int(rss.group(1)) / 1024, int(peak.group(1)) / 1024, rss_mb(pid))


@dataclass(frozen=True)
class Replica:
    process: subprocess.Popen[bytes]
    webhook: WebhookProcess
    ready_at: float  # wall clock (time.time) of the first /readyz 200


@contextmanager
def replica(kubeconfig: Path, workdir: Path, *, grace_s: int) -> Iterator[Replica]:
    """A webhook replica, ready, with sweep grace `grace_s`; stopped on leaving."""
    environ = {"VGPU_BRIDGE_SWEEP_GRACE_SECONDS": str(grace_s),
               "VGPU_BRIDGE_SWEEP_INTERVAL_SECONDS": str(INTERVAL_S)}  # fmt: skip
    with running_replica(kubeconfig, workdir, environ=environ) as (process, webhook, _):
        yield Replica(process, webhook, time.time())


def template_watches(kube: KubeClient) -> int:
    """Open WATCH requests on ResourceClaimTemplates, as the API server counts them."""
    connection = ApiConnection(kube)
    try:
        text = connection.send("GET", "/metrics").decode()
    finally:
        connection.close()
    return sum(
        int(float(value))
        for labels, value in _WATCHES.findall(text)
        if 'resource="resourceclaimtemplates"' in labels and 'verb="WATCH"' in labels
    )


def wait_for(
    condition: str, check: Callable[[], object], *, timeout_s: float, replica: Replica
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if replica.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{condition}: not within {timeout_s:.0f} s; "
                               f"{replica.webhook.log()[-2000:]}")  # fmt: skip
        time.sleep(POLL_S * 5)


def log_lines(webhook: WebhookProcess, event: str) -> list[Json]:
    """The webhook's JSON log lines whose event is `event`."""
    lines = []
    for line in webhook.log().splitlines():
        if f'"{event}"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event:
            lines.append(record)
    return lines


def namespaced_lists(requests: Requests, resource: str) -> int:
    return requests.lists(resource, scope="namespace")


def quiet(kube: KubeClient, counted: Callable[[Counter[RequestKind]], int]) -> None:
    """Until the `counted` part of the API server's request totals has not grown for QUIET_S."""
    last, since = counted(request_totals(kube)), time.monotonic()
    while time.monotonic() - since < QUIET_S:
        time.sleep(0.5)
        now = counted(request_totals(kube))
        if now != last:
            last, since = now, time.monotonic()


def namespaced_pod_lists(totals: Counter[RequestKind]) -> int:
    """The sweeper's and the restorer's first LIST in each namespace they read."""
    return totals[RequestKind("LIST", "pods", "namespace")]


def writes_and_lists(totals: Counter[RequestKind]) -> int:
    """What the controllers do after objects are made (ReplicaSets, claims, status updates);
    lease renewals, which never stop, left out."""
    return sum(n for kind, n in totals.items()
               if kind.resource not in ("", "leases") and kind.verb != "WATCH")  # fmt: skip


@dataclass(frozen=True)
class Sweep:
    pass_s: float  # ready to the pass's log line
    deleted: int  # as the pass logged them
    kept: int  # our templates listed afterwards
    restored: int  # templates the restorer made again (log lines)
    queue_full: int  # deletions the restorer's full queue did not check
    memory: Memory
    requests: Requests


def measure_sweep(kube: KubeClient, kubeconfig: Path, workdir: Path, layout: Layout) -> Sweep:
    timeout_s = max(120.0, 0.1 * layout.templates)

    def run() -> tuple[float, int, Memory, int, int]:
        with replica(kubeconfig, workdir, grace_s=SWEEP_GRACE_S) as started:
            wait_for("the first sweep pass", lambda: log_lines(started.webhook, SWEPT),
                     timeout_s=timeout_s, replica=started)  # fmt: skip
            (line,) = log_lines(started.webhook, SWEPT)
            ended = datetime.fromisoformat(line["timestamp"]).timestamp()
            quiet(kube, namespaced_pod_lists)
            held = memory(started.process.pid)
            restored = sum(len(r.get("templates") or ()) for r in log_lines(started.webhook,
                                                                             RESTORED))  # fmt: skip
            queue_full = len(log_lines(started.webhook, QUEUE_FULL))
            return ended - started.ready_at, len(line["templates"]), held, restored, queue_full

    (pass_s, deleted, held, restored, queue_full), requests = counted(kube, run)
    kept = sum(
        len(kube.items(templates_path(namespace), labelSelector=OURS))
        for namespace in layout.namespace_names()
    )
    return Sweep(pass_s, deleted, kept, restored, queue_full, held, requests)


def measure_held(kube: KubeClient, kubeconfig: Path, workdir: Path) -> tuple[Memory, Requests]:
    """A replica's memory once its template index has listed every template there is (nothing
    swept), and the requests of that start."""
    before = template_watches(kube)

    def run() -> Memory:
        with replica(kubeconfig, workdir, grace_s=HOLD_GRACE_S) as started:
            wait_for("the template index's list", lambda: template_watches(kube) > before,
                     timeout_s=READY_TIMEOUT_S, replica=started)  # fmt: skip
            time.sleep(SETTLE_S)
            return memory(started.process.pid)

    return counted(kube, run)


@dataclass(frozen=True)
class Lifecycle:
    layout: Layout
    empty: Memory
    held: Memory
    held_requests: Requests
    sweep: Sweep


def measure_lifecycle(
    cluster: LocalCluster,
    *,
    templates: int,
    namespaces: int,
    referenced: float,
    workdir: Path,
    threads: int = CLIENT_THREADS,
) -> str:
    """Create the templates and their referrers on `cluster`, measure, delete the namespaces
    (waiting until they are gone); returns the table."""
    layout = Layout(templates, namespaces, round(templates * referenced))
    kube = cluster.client()
    try:
        create_namespaces(kube, layout)
        empty, _ = measure_held(kube, cluster.kubeconfig, workdir)
        created_at = create_templates(kube, layout, threads=threads)
        create_referrers(kube, layout, threads=threads)
        quiet(kube, writes_and_lists)  # the controllers done with what was made
        _progress(f"{layout.templates:,} templates, {layout.referenced:,} referrers created")
        held, held_requests = measure_held(kube, cluster.kubeconfig, workdir)
        time.sleep(max(0.0, created_at + SWEEP_GRACE_S + 1.0 - time.time()))  # whole seconds
        sweep = measure_sweep(kube, cluster.kubeconfig, workdir, layout)
    finally:
        remove(kube, layout)
    return lifecycle_table(Lifecycle(layout, empty, held, held_requests, sweep))


def remove(kube: KubeClient, layout: Layout, *, timeout_s: float = 600.0) -> None:
    names = layout.namespace_names()
    for name in names:
        kube.delete(f"/api/v1/namespaces/{name}", grace_period_s=0)
    deadline = time.monotonic() + timeout_s
    while any(kube.exists(f"/api/v1/namespaces/{name}") for name in names):
        if time.monotonic() > deadline:
            raise RuntimeError(f"namespaces not gone in {timeout_s:.0f} s")
        time.sleep(0.5)


def _check(measured: int, expected: int) -> str:
    return f"{measured:,} (expected {expected:,})" + ("" if measured == expected else " MISMATCH")


def lifecycle_table(result: Lifecycle) -> str:
    layout, sweep = result.layout, result.sweep
    unreferenced = layout.templates - layout.referenced
    swept = len(layout.namespace_names())  # every template is past the grace: all are read
    per_1000 = 1000 * (result.held.rss_mb - result.empty.rss_mb) / layout.templates
    restorer_passes = namespaced_lists(sweep.requests, "pods") - swept
    counted_kinds = sorted({kind.resource for kind in REFERRERS})  # Volcano's Job is "jobs" too
    workload_lists = sum(namespaced_lists(sweep.requests, name) for name in counted_kinds)
    per_namespace = len(REFERRERS) + len(EXTRA_KINDS)
    rows = [
        ("webhook RSS, no templates (ready + 2 s)", str(result.empty)),
        (f"webhook RSS, {layout.templates:,} templates listed (+ 2 s), none swept",
         str(result.held)),
        ("  growth per 1,000 templates (RSS)", f"{per_1000:+.2f} MB"),
        ("first sweep pass, ready to its log line", f"{sweep.pass_s:.2f} s"),
        ("  pass time per template deleted",
         f"{1000 * sweep.pass_s / max(1, sweep.deleted):.2f} ms"),
        ("  templates deleted (its log line)", _check(sweep.deleted, unreferenced)),
        ("  templates kept (listed after)", _check(sweep.kept, layout.referenced)),
        ("  templates the restorer made again", _check(sweep.restored, 0)),
        ("  template LIST pages (index + sweeper)",
         _check(sweep.requests.lists("resourceclaimtemplates"), 2 * pages(layout.templates))),
        ("  template DELETEs", _check(_count(sweep.requests, "DELETE", "resourceclaimtemplates"),
                                      unreferenced)),
        ("  namespaced pod LISTs: sweeper (1 per namespace) + restorer passes",
         f"{swept} + {restorer_passes:,}"),
        (f"  namespaced LISTs of the {len(counted_kinds)} workload resources (pods included)",
         f"{workload_lists:,}"),
        ("  requests on resources, start to quiet", f"{sweep.requests.on_resources():,}"),
        ("  the same, the start with nothing to sweep",
         f"{result.held_requests.on_resources():,}"),
        ("  deletions the restorer's full queue did not check", f"{sweep.queue_full:,}"),
        ("webhook RSS after the pass and the restorer (quiet)", str(sweep.memory)),
    ]  # fmt: skip
    width = max(len(step) for step, _ in rows) + 2
    lines = [
        f"part 3, the template lifecycle: {layout.templates:,} templates of ours in "
        f"{len(layout.namespace_names())} namespaces, {layout.referenced:,} named by a pod or a "
        f"workload, {unreferenced:,} by nothing and past the grace ({SWEEP_GRACE_S} s); requests "
        "as the API server counted them (the whole cluster's)",
        f"{'step':<{width}}figure",
        *(f"{step:<{width}}{figure}" for step, figure in rows),
        f"per namespace: the sweeper LISTs {per_namespace} kinds ({len(REFERRERS)} workload "
        f"kinds, {len(EXTRA_KINDS)} extra; those not installed answer 404 and are not in the "
        f"count): {swept * per_namespace:,} LISTs here, and it scans the {layout.templates:,} "
        f"templates past the grace once per namespace ({swept * layout.templates:,} steps, in "
        "memory); "
        f"the restorer LISTs {len(REFERRERS)} kinds per namespace and batch of deletions: "
        f"{restorer_passes:,} passes for {sweep.deleted:,} deletions",
    ]
    return "\n".join(lines)


def _count(requests: Requests, verb: str, resource: str) -> int:
    return sum(n for kind, n in requests.counts.items()
               if kind.verb == verb and kind.resource == resource)  # fmt: skip


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling.lifecycle",
                                     description=(__doc__ or "").split("\n")[0])  # fmt: skip
    parser.add_argument("--templates", type=int, default=10_000, help="default 10,000")
    parser.add_argument("--namespaces", type=int, default=100, help="default 100")
    parser.add_argument("--referenced", type=float, default=0.3,
                        help="fraction named by a pod or workload (default 0.3)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=CLIENT_THREADS, help="client threads")
    args = parser.parse_args(argv)
    unreferenced = args.templates - round(args.templates * args.referenced)
    if args.namespaces < 1 or not 0 <= args.referenced < 1 or unreferenced < 1:
        parser.error(
            "--namespaces must be >= 1, --referenced in [0, 1), and at least one "
            "template must be left unreferenced (the pass logs only what it deletes)"
        )
    return args


def main(argv: list[str]) -> int:
    args = arguments(argv)
    with running_cluster(Settings.from_env()) as cluster, tempfile.TemporaryDirectory() as tmp:
        table = measure_lifecycle(cluster, templates=args.templates, namespaces=args.namespaces,
                                  referenced=args.referenced, workdir=Path(tmp) / "webhook",
                                  threads=args.threads)  # fmt: skip
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
