"""The command line of ``bench/scale.py``: grow the fleet step by step on one private control
plane, measure at each step, print a table per part."""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.scaling import admission
from bench.scaling.dense_node import DenseNode, dense_node_table
from bench.scaling.fleet import GPUS_PER_NODE, Fleet, Layout
from bench.scaling.lifecycle import measure_lifecycle
from bench.scaling.replica_start import running_replica, start_replica
from bench.scaling.tables import ReplicaRow, Step, ViewerRow, replica_table, viewer_table
from bench.scaling.viewer import ViewerRun, expected_lists, run_viewer, start_floor
from e2e.cluster import LocalCluster, Settings, running_cluster
from e2e.webhook.service_proxy import behind_service

DEFAULT_STEPS = (1000, 2500, 10000)
HOOK_NAMESPACE = "bench-vgpu-bridge"  # the webhook's Service for the viewer's -n row
VIEWER_ALL_GOAL_S, VIEWER_NAMESPACE_GOAL_S, REPLICA_READY_GOAL_S = 5.0, 1.0, 5.0


def _steps(text: str) -> list[int]:
    try:
        steps = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of whole numbers: {text!r}") from None
    if not steps or any(s < GPUS_PER_NODE for s in steps) or steps != sorted(set(steps)):
        raise argparse.ArgumentTypeError(
            f"GPU counts of at least {GPUS_PER_NODE}, rising (the fleet grows): {text!r}"
        )
    return steps


def arguments(argv: list[str], description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/scale.py", description=description)
    parser.add_argument("--steps", type=_steps, default=list(DEFAULT_STEPS),
                        help="GPU counts, rising (default 1000,2500,10000)")  # fmt: skip
    parser.add_argument("--claims-per-gpu", type=float, default=2.0,
                        help="allocated claims per GPU (default 2)")  # fmt: skip
    parser.add_argument("--viewer-runs", type=int, default=3, help="runs of each view per step")
    parser.add_argument("--replica-starts", type=int, default=3, help="webhook starts per step")
    parser.add_argument("--threads", type=int, default=8, help="client threads that create")
    parser.add_argument("--templates", type=int, default=10_000,
                        help="part 3: templates at the last step (0: skip)")  # fmt: skip
    parser.add_argument("--template-namespaces", type=int, default=100,
                        help="part 3: namespaces they are spread over (default 100)")  # fmt: skip
    parser.add_argument("--dense-shares", type=int, default=48,
                        help="part 5: shares per card of the 8-card node (0: skip)")  # fmt: skip
    parser.add_argument(
        "--no-admission",
        action="store_true",
        help="skip part 1 (admissions through the API server, replicas)",
    )
    args = parser.parse_args(argv)
    if args.claims_per_gpu <= 0 or args.viewer_runs < 1 or args.replica_starts < 1:
        parser.error("--claims-per-gpu must be above 0, --viewer-runs and --replica-starts >= 1")
    return args


@dataclass(frozen=True)
class View:
    """One way of running the viewer: its name in the table, its arguments, its goal."""

    name: str
    scope: list[str]
    goal_s: float
    namespace: str | None  # None: every namespace
    webhook: bool = False  # a webhook replica behind a Service: -n reads its /bookings


def views(layout: Layout) -> list[View]:
    """Each view lists the agents' pods once, in the release namespace (where a chart install's
    webhook configuration points it; named here, since only the /bookings row has one)."""
    small, agents = layout.small_namespace, ["--agent-namespace", HOOK_NAMESPACE]
    return [
        View("-A", ["-A", *agents], VIEWER_ALL_GOAL_S, None),
        View("-n, /bookings", ["-n", small, *agents], VIEWER_NAMESPACE_GOAL_S, small, webhook=True),
        View("-n, every claim", ["-n", small, *agents], VIEWER_NAMESPACE_GOAL_S, small),
    ]


def measure_viewer(
    cluster: LocalCluster, fleet: Fleet, step: Step, view: View, *, runs: int, workdir: Path
) -> ViewerRow:
    """`runs` views; with `view.webhook`, while a webhook replica answers behind its Service
    (started, and its claims listed, before the first run)."""
    layout, kube = fleet.layout, cluster.client()
    shares = step.claims if view.namespace is None else min(layout.small_claims, step.claims)

    def measured() -> list[ViewerRun]:
        return [run_viewer(kube, cluster.kubeconfig, view.scope, claim_prefix=layout.claim_prefix)
                for _ in range(runs)]  # fmt: skip

    if view.webhook:
        with (
            running_replica(cluster.kubeconfig, workdir, listen_host="0.0.0.0") as (_, hook, _),
            behind_service(kube, port=hook.port, namespace=HOOK_NAMESPACE, node=layout.node(0)),
        ):
            done = measured()
    else:
        done = measured()
    expected = expected_lists(
        claims=step.claims,
        pods=0,
        slices=step.slices,
        namespaced=view.namespace is not None,
        namespace_claims=shares,
        namespace_nodes=len({layout.card_of(claim)[0] for claim in range(shares)}),
        every_claim=not view.webhook,
    )
    return ViewerRow(step, view.name, done, expected, shares, view.goal_s)


def measure_replica(cluster: LocalCluster, step: Step, *, starts: int, workdir: Path) -> ReplicaRow:
    kube = cluster.client()
    measured = [start_replica(kube, cluster.kubeconfig, workdir) for _ in range(starts)]
    return ReplicaRow(step, measured, REPLICA_READY_GOAL_S)


def main(argv: list[str], *, description: str) -> int:
    args = arguments(argv, description)
    layout = Layout(claims_per_gpu=args.claims_per_gpu)
    viewer_rows: list[ViewerRow] = []
    replica_rows: list[ReplicaRow] = []
    admission_rows: list[admission.AdmissionRow] = []
    replicas = ""
    floor = start_floor(args.viewer_runs)
    with running_cluster(Settings.from_env()) as cluster, tempfile.TemporaryDirectory() as tmp:
        fleet = Fleet(cluster.client(), layout, threads=args.threads)
        for gpus in args.steps:
            claims = round(gpus * args.claims_per_gpu)
            created_s = fleet.grow(gpus=gpus, claims=claims)
            step = Step(gpus, fleet.gpus, claims, len(fleet.slices), fleet.nodes)
            _progress(
                f"step {gpus:,} GPUs: {step.nodes:,} nodes, {step.cards:,} cards, "
                f"{step.slices:,} slices, {claims:,} claims; grown in {created_s:.0f} s"
            )
            for view in views(layout):
                workdir = Path(tmp) / "viewer-webhook"
                row = measure_viewer(cluster, fleet, step, view, runs=args.viewer_runs,
                                     workdir=workdir)  # fmt: skip
                viewer_rows.append(row)
                _progress(viewer_table(viewer_rows[-1:]).splitlines()[2])
            replica_rows.append(measure_replica(cluster, step, starts=args.replica_starts,
                                                workdir=Path(tmp) / "webhook"))  # fmt: skip
            _progress(replica_table(replica_rows[-1:]).splitlines()[2])
            if not args.no_admission:
                admitted = admission.measure_admission(
                    cluster, step, threads=args.threads, workdir=Path(tmp) / "admission"
                )
                admission_rows.append(admitted)
                _progress(admission.admission_table([admitted]).splitlines()[2])
        if admission_rows:  # part 1's replicas, at the last step
            loads = admission.measure_replicas(cluster, workdir=Path(tmp) / "replicas")
            replicas = admission.replica_table(loads)
            _progress(replicas)
        # parts 3 and 5 at the last step: the template lifecycle, then the densest node
        lifecycle = ""
        if args.templates:
            lifecycle = measure_lifecycle(
                cluster,
                templates=args.templates,
                namespaces=args.template_namespaces,
                referenced=0.3,
                workdir=Path(tmp) / "lifecycle",
            )
        dense = (
            dense_node_table(DenseNode(shares_per_card=args.dense_shares), cluster=cluster)
            if args.dense_shares
            else ""
        )
    print(viewer_table(viewer_rows, floor))
    print()
    print(replica_table(replica_rows))
    admitted_table = admission.admission_table(admission_rows) if admission_rows else ""
    tables = (admitted_table, replicas, lifecycle, dense)
    for table in tables:
        if table:
            print()
            print(table)
    return 0


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
