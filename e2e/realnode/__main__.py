"""``python -m e2e.realnode build|spike|up|down``.

``build`` builds or reuses containerd, its runc shim, ctr, runc and the image programs (and the
control plane's binary, which holds the kubelet) and prints how long it took. ``spike`` starts a
private control plane and the real node, runs one hostNetwork pod to completion, tears everything
down and prints what happened (exit 1 if the pod did not run as expected). ``down`` removes
whatever a crashed run left: processes, mounts, cgroups, the node's directories (and
/run/nvidia/driver where the tier made it), the kubelet's sysctl changes, the private control
plane. ``up`` starts the private control plane and the real
node and leaves them running (last line: ``export KUBECONFIG=...``) until ``down``.
"""

from __future__ import annotations

import sys

from e2e.cluster import LocalCluster, Settings, ensure_binary
from e2e.cluster.build import report as cluster_report
from e2e.cluster.settings import SettingsError
from e2e.realnode import build
from e2e.realnode.host import Layout
from e2e.realnode.node import down, start_node
from e2e.realnode.spike import cluster_state_dir, run_spike, start_private_cluster

USAGE = "usage: python -m e2e.realnode build|spike|up|down"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("build", "spike", "up", "down"):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        print(error, file=sys.stderr)
        return 2
    if argv[0] == "build":
        print(build.report(build.ensure_runtime(settings)))
        print(cluster_report(ensure_binary(settings)))
        return 0
    if argv[0] == "down":
        cluster = LocalCluster.load(cluster_state_dir(settings))
        client = cluster.client() if cluster is not None and cluster.healthy() else None
        result = down(Layout(), build.bin_dir(settings), client=client)
        if cluster is not None:
            cluster.stop()
        print("\n".join(result.lines()))
        return 0 if result.clean else 1
    if argv[0] == "up":
        return _up(settings)
    passed, lines = run_spike(settings)
    print("\n".join(lines))
    print("spike: PASSED" if passed else "spike: FAILED")
    return 0 if passed else 1


def _up(settings: Settings) -> int:
    runtime = build.ensure_runtime(settings)
    binary = ensure_binary(settings).binary
    cluster = start_private_cluster(settings, binary, die_with_parent=False)
    try:
        node = start_node(cluster, bin_dir=runtime.bin_dir, kubelet_binary=binary)
    except BaseException:
        cluster.stop()
        raise
    for what, seconds in node.timings.items():
        print(f"{what}: {seconds:.1f}s")
    print(
        f"node {node.name} Ready in cluster {cluster.server}; `python -m e2e.realnode down` ends it"
    )
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
