"""`vgpu-bridge status` and the kubectl plugin `kubectl-vgpu status`: the I/O shell around
`report.build_report` (reads through `vgpu_bridge.kube`, prints with `render`).

Reads: ResourceSlices (cluster-scoped), ResourceClaims and Pods (in one namespace: `-n`, else
the kubeconfig context's, else `default`, as kubectl chooses; in every one with `-A`), and, when
listing the agents' pods is allowed, each agent's `/metrics` through the API server's pod proxy.
The agents are the pods with their labels in the release namespace only (`release`: the namespace
of the Service our MutatingWebhookConfiguration calls, or as `--agent-namespace` names it), never
a look-alike in a tenant's namespace.
With a namespace, the cards shown are those of the nodes its shares are on (their slices read by
node, their agents only asked), and the cards' bookings (every namespace's claims on them) come
from the webhook's /bookings through the service proxy (`card_bookings`), else from a list of
every claim.
A user needs only namespaced reads: a forbidden slice list or agent lookup becomes a note, and
the shares are still shown.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from vgpu_bridge.core.placements import placements
from vgpu_bridge.core.profiles import DEFAULT, PROFILES, DriverProfile, our_profile, profile_named
from vgpu_bridge.kube import (
    KubeApi,
    KubeConfigError,
    KubeError,
    api_path,
    context_namespace,
    dns_label_problem,
    dns_subdomain_problem,
    unreachable_reason,
)
from vgpu_bridge.status.card_bookings import webhook_bookings
from vgpu_bridge.status.model import Report
from vgpu_bridge.status.release import AGENTS, Release, service_problem
from vgpu_bridge.status.render import FORMATS, render
from vgpu_bridge.status.report import build_report
from vgpu_bridge.status.usage import MetricsError, Usage, merged, parse_agent_metrics
from vgpu_bridge.version import VersionAction

Json = dict[str, Any]
RESOURCE = "/apis/resource.k8s.io/v1"
AGENT_SELECTOR = "app.kubernetes.io/name=vgpu-bridge,app.kubernetes.io/component=agent"
EXIT_FAILED = 1
EXIT_USAGE = 2
PROG = "vgpu-bridge status"
SLICE_NODES_MAX = 32  # -n reads the slices of at most this many nodes one by one, else all


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", help="the kubeconfig context to use (default: its current)")
    parser.add_argument(
        "-n",
        "--namespace",
        help="this namespace's claims and pods (default: the context's namespace, else default)",
    )
    parser.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (wins over -n)"
    )
    parser.add_argument("-o", "--output", default="table", choices=FORMATS)
    parser.add_argument("-w", "--watch", action="store_true", help="print again every --interval")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between --watch views")
    parser.add_argument("--driver-name", default=DEFAULT.driver, help="our DRA driver's name")
    parser.add_argument(
        "--profile",
        default=DEFAULT.name,
        choices=tuple(PROFILES),
        help="whose cards and shares: default (our agents'), hami (HAMi's DRA driver) or nvidia "
        "(NVIDIA's DRA driver gpu.nvidia.com, our enforcer beside each share); the webhook's "
        "--profile",
    )
    parser.add_argument(
        "--nvidia-consumable-shares",
        default="100",
        help="with --profile nvidia: NVIDIA's --consumable-shares (memory, unlimited or N: a "
        "card's N shares are its SMs); the webhook's setting of the same name",
    )
    parser.add_argument(
        "--agent-selector",
        default=AGENT_SELECTOR,
        help="label selector of the agents' pods, in their namespace (see --agent-namespace)",
    )
    parser.add_argument(
        "--agent-namespace",
        help="the namespace of the node agents' pods, whose /metrics give live usage (default: "
        "--webhook-service's namespace, else that of the Service our "
        "MutatingWebhookConfiguration calls, where the chart runs both; pods with the agents' "
        "labels in other namespaces are never asked: anyone may label a pod)",
    )
    parser.add_argument(
        "--webhook-service",
        help="NAMESPACE/NAME of the webhook's Service, whose /bookings gives -n the cards' "
        "bookings without listing every claim (default: the Service our "
        "MutatingWebhookConfiguration calls; never one found by its labels alone)",
    )
    parser.add_argument("--request-timeout", type=float, default=10.0, help="seconds per request")
    parser.set_defaults(run=main)


def main(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    out: TextIO | None = None,
    *,
    sleep: Callable[[float], None] = time.sleep,
    prog: str = PROG,
) -> int:
    """Print the status once, or every `--interval` seconds with `--watch` until interrupted.
    Every failure is one line on stderr, prefixed with `prog` (the name it was run under)."""
    out = out or sys.stdout
    problem = _usage_problem(args)
    if problem is not None:
        print(f"{prog}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    kubeconfig = kubeconfig_path(args.kubeconfig, environ)
    api: KubeApi | None = None
    try:
        api = KubeApi.connect(kubeconfig, context=args.context, timeout_s=args.request_timeout)
        namespace = _namespace(args, kubeconfig, environ)
        while True:
            report = read_report(api, namespace=namespace, driver=args.driver_name,
                                 profile=view_profile(args),
                                 agent_selector=args.agent_selector,
                                 webhook_service=args.webhook_service,
                                 agent_namespace=args.agent_namespace)  # fmt: skip
            _show(report, args, out)
            if not args.watch:
                return 0
            sleep(args.interval)
    except KeyboardInterrupt:
        return 0
    except Exception as error:
        line = failure_line(error, kubeconfig=kubeconfig, server=api.server if api else None)
        if line is None:
            raise
        print(f"{prog}: {line}", file=sys.stderr)
        return EXIT_FAILED


def _namespace(
    args: argparse.Namespace, kubeconfig: str | None, environ: Mapping[str, str]
) -> str | None:
    """kubectl's choice: every namespace with `-A` (over `-n`), else `-n`, else the context's
    namespace, else `default`."""
    if args.all_namespaces:
        return None
    if args.namespace is not None:
        namespace: str = args.namespace
        return namespace
    namespace = context_namespace(kubeconfig, context=args.context, environ=environ)
    if problem := dns_label_problem(namespace):
        raise KubeConfigError(f"the kubeconfig context's namespace {problem}")
    return namespace


def failure_line(error: Exception, *, kubeconfig: str | None, server: str | None) -> str | None:
    """What to tell the user about `error`, in one line that says what to do; None for an
    error that is no failure to reach or read the API (a bug: its traceback is wanted).
    `server` is None until a connection is configured."""
    if isinstance(error, KubeConfigError):
        if kubeconfig is None and server is None:
            why = str(error.__cause__ or error).rstrip(".")
            return (
                "no kubeconfig (no --kubeconfig, $KUBECONFIG unset, no ~/.kube/config) and not"
                f" in a cluster ({why}): point at one with --kubeconfig FILE or"
                " KUBECONFIG=FILE"
            )
        return str(error)
    if isinstance(error, KubeError):
        return _refused(error, server)
    reason = unreachable_reason(error)
    if reason is not None:
        where = f" at {server}" if server else ""
        return f"cannot reach the API server{where}: {reason}"
    if isinstance(error, OSError):
        return str(error)
    return None


def _refused(error: KubeError, server: str | None) -> str:
    if error.status == 403:
        verb, resource, namespace = rbac_request(error.method, error.path)
        where = f"in namespace {namespace}" if namespace else "in every namespace"
        scope = f" -n {namespace}" if namespace else " -A"
        narrower = "" if namespace else ", or look at one namespace with -n NAMESPACE"
        return (
            f"forbidden (HTTP 403): this user may not {verb} {resource} {where}; ask for it (the"
            " chart's <release>-status-viewer Role and ClusterRole hold what this view reads)"
            f"{narrower}; check with: kubectl auth can-i {verb} {resource}{scope}"
        )
    if error.status == 401:
        at = f" at {server}" if server else ""
        return (
            f"unauthorized (HTTP 401): the API server{at} refused these credentials; log in"
            " again, or choose another --context"
        )
    return str(error).splitlines()[0]


def rbac_request(method: str, path: str) -> tuple[str, str, str | None]:
    """The RBAC verb, resource (`resource[.group][/subresource]`, as `kubectl auth can-i` takes
    it) and namespace a request of ours needs."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f".{group}" if group else "")
    if len(rest) >= 3:
        resource += f"/{rest[2]}"
    verbs = {"GET": "get" if len(rest) > 1 else "list", "WATCH": "watch", "POST": "create"}
    return verbs.get(method, method.lower()), resource, namespace


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.namespace is not None and (problem := dns_label_problem(args.namespace)):
        return f"--namespace: {problem}"
    if problem := dns_subdomain_problem(args.driver_name):
        return f"--driver-name: {problem}"
    try:
        view_profile(args)
    except ValueError as error:
        return f"--nvidia-consumable-shares: {error}"
    if args.agent_namespace is not None and (problem := dns_label_problem(args.agent_namespace)):
        return f"--agent-namespace: {problem}"
    if args.webhook_service is not None and (problem := service_problem(args.webhook_service)):
        return f"--webhook-service: {problem}"
    if args.interval <= 0:
        return f"--interval: must be more than 0 seconds, got {args.interval}"
    if args.request_timeout <= 0:
        return f"--request-timeout: must be more than 0 seconds, got {args.request_timeout}"
    return None


def _show(report: Report, args: argparse.Namespace, out: TextIO) -> None:
    if args.watch and args.output in ("table", "wide"):
        print(f"--- {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC", file=out)
    print(render(report, args.output), end="", file=out, flush=True)


def kubeconfig_path(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """kubectl's order: `--kubeconfig`, then `$KUBECONFIG` (a list, as the client merges it),
    then `~/.kube/config` when it exists; None (in-cluster) otherwise."""
    if flag:
        return flag
    if environ.get("KUBECONFIG"):
        return environ["KUBECONFIG"]
    home = environ.get("HOME")
    default = Path(home, ".kube", "config") if home else None
    return str(default) if default is not None and default.is_file() else None


def view_profile(args: argparse.Namespace) -> DriverProfile:
    """The driver profile the view reads (ValueError for a mode NVIDIA's driver has not)."""
    return profile_named(args.profile, our_driver=args.driver_name,
                         nvidia_consumable_shares=args.nvidia_consumable_shares)  # fmt: skip


def read_report(
    api: KubeApi,
    *,
    namespace: str | None,
    driver: str,
    agent_selector: str,
    webhook_service: str | None = None,
    agent_namespace: str | None = None,
    profile: DriverProfile | None = None,
) -> Report:
    """What the caller may read, as a report; what it may not, as notes. With a namespace, the
    cards are those of the nodes its shares are on, and their bookings come from the webhook's
    /bookings where it answers, else from every claim. Live usage comes from the agents of the
    release namespace only. `profile`: whose cards (default: ours, under `driver`); NVIDIA's
    driver's under the nvidia profile."""
    notes: list[str] = []
    release = Release(api, webhook_service=webhook_service, agent_namespace=agent_namespace)
    profile = profile or our_profile(driver)
    driver = profile.driver
    where = f"/namespaces/{namespace}" if namespace else ""
    claims = _items(api, f"{RESOURCE}{where}/resourceclaims")
    pods = _items(api, f"/api/v1{where}/pods")
    nodes = share_nodes(claims, profile) if namespace else None
    slices = read_slices(api, driver, nodes, notes)
    bookings = card_bookings = None
    if namespace and slices:
        card_bookings = webhook_bookings(api, release, notes)
    if namespace and slices and card_bookings is None:
        what = "other namespaces' claims (BOOKED and FREE count this namespace's only)"
        bookings = _allowed(api, f"{RESOURCE}/resourceclaims", what, notes)
    agent_namespaces = release.agent_namespaces(notes)
    usage = agent_usage(api, agent_selector, notes, nodes=nodes, namespaces=agent_namespaces)
    return build_report(slices or [], claims, pods, profile=profile, bookings=bookings,
                        card_bookings=card_bookings, usage=usage, notes=notes,
                        nodes=nodes)  # fmt: skip


def share_nodes(claims: list[Json], profile: DriverProfile) -> frozenset[str]:
    """The nodes (our slices' pools) that `claims` hold devices of our driver on."""
    return frozenset(p.pool for claim in claims for p in placements(claim, profile=profile))


def read_slices(
    api: KubeApi, driver: str, nodes: frozenset[str] | None, notes: list[str]
) -> list[Json] | None:
    """Our driver's slices: of `nodes` only, one list per node, where they are at most
    SLICE_NODES_MAX (a namespace's shares at 10,000 GPUs: a few of 1,250 slices); every node's
    otherwise. None, with a note, when this user may not list them."""
    what = "ResourceSlices (cards)"
    path = f"{RESOURCE}/resourceslices"
    ours = {} if dns_subdomain_problem(driver) else {"fieldSelector": f"spec.driver={driver}"}
    names_ok = nodes is not None and not any(dns_subdomain_problem(n) for n in nodes)
    if nodes is None or not ours or not names_ok or len(nodes) > SLICE_NODES_MAX:
        return _allowed(api, path, what, notes, **ours)
    found: list[Json] = []
    for node in sorted(nodes):
        selector = f"{ours['fieldSelector']},spec.nodeName={node}"
        listed = _allowed(api, path, what, notes, fieldSelector=selector)
        if listed is None:
            return None
        found += listed
    return found


def _items(api: KubeApi, path: str, **query: str) -> list[Json]:
    return api.list_all(path, keep=None, **query).items


def _allowed(
    api: KubeApi, path: str, what: str, notes: list[str], **query: str
) -> list[Json] | None:
    """The list, or None with a note when this user may not read it."""
    try:
        return _items(api, path, **query)
    except KubeError as error:
        if error.status not in (401, 403):
            raise
        notes.append(f"{what}: forbidden for this user, not shown")
        return None


def agent_usage(
    api: KubeApi,
    selector: str,
    notes: list[str],
    *,
    namespaces: Sequence[str],
    nodes: frozenset[str] | None = None,
) -> Usage | None:
    """Live usage from each running agent's `/metrics` (pod proxy): the pods `selector` picks in
    `namespaces` (the release's: a pod elsewhere with the agents' labels may be anyone's), of
    `nodes` only where given; None when no agent can be listed. An agent that does not answer is
    a note; its cards show no usage."""
    agents = _agent_pods(api, selector, namespaces, notes)
    if agents is None:
        return None
    usages = []
    for pod in agents:
        node, path = (pod.get("spec") or {}).get("nodeName"), metrics_path(pod)
        if not node or path is None or (pod.get("status") or {}).get("phase") != "Running":
            continue
        if nodes is not None and node not in nodes:
            continue
        try:
            usages.append(parse_agent_metrics(node, api.get_text(path)))
        except Exception as error:  # one agent's failure is a note, never the whole view's
            if not isinstance(error, KubeError | MetricsError) and not unreachable_reason(error):
                raise
            notes.append(f"the agent on {node}: metrics not read ({str(error)[:160]})")
    return merged(usages)


def _agent_pods(
    api: KubeApi, selector: str, namespaces: Sequence[str], notes: list[str]
) -> list[Json] | None:
    """The pods `selector` picks in each of `namespaces`; None (with one note) when there is no
    namespace or a list is not allowed."""
    found: list[Json] = []
    for namespace in namespaces:
        path = api_path("/api/v1", "namespaces", namespace, "pods")
        listed = _allowed(api, path, AGENTS, notes, labelSelector=selector)
        if listed is None:
            return None
        found += listed
    return found if namespaces else None


def metrics_path(pod: Json) -> str | None:
    """The pod proxy path of the agent's `/metrics` (its container port named `metrics`); None
    without one, or for names that are not names (they would not stay one path segment)."""
    meta = pod.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if dns_subdomain_problem(name) or dns_label_problem(namespace):
        return None
    for container in (pod.get("spec") or {}).get("containers") or ():
        for port in container.get("ports") or ():
            number = port.get("containerPort")
            if port.get("name") == "metrics" and isinstance(number, int):
                return f"/api/v1/namespaces/{namespace}/pods/{name}:{number}/proxy/metrics"
    return None


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl-vgpu`: kubectl runs it for `kubectl vgpu …` (a plugin found on PATH)."""
    prog = plugin_prog(sys.argv[0])
    parser = argparse.ArgumentParser(prog=prog, description="GPU shares of vgpu-bridge")
    parser.add_argument("--version", action=VersionAction)
    commands = parser.add_subparsers(dest="command", required=True)
    add_arguments(commands.add_parser("status", help="which pods share which card, and how"))
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    return main(args, os.environ, prog=prog)


def plugin_prog(executable: str) -> str:
    """How the user ran the plugin: kubectl runs `kubectl-NAME` for `kubectl NAME`, with `_` in
    the file name for `-` in the command (`kubectl-vgpu_bridge`: `kubectl vgpu-bridge`, krew's)."""
    name = Path(executable).name
    if name.startswith("kubectl-") and len(name) > len("kubectl-"):
        return "kubectl " + name.removeprefix("kubectl-").replace("_", "-")
    return "kubectl vgpu"
