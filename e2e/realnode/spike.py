"""The spike of issue 10: a plain hostNetwork pod runs and exits on the real node.

Recipe of shared/reference/realnode.md §6, steps 1-7 and 9: host facts, builds, images, stale
state wiped and sysctls saved, containerd, a private control plane, the kubelet as
``system:node:<name>`` until the Node is Ready, one pod from the local test image placed by
kube-scheduler (``imagePullPolicy: Never``) that prints and exits 0, then teardown.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from e2e.cluster import LocalCluster, Settings, ensure_binary, start_cluster
from e2e.cluster.client import ApiError, Json, KubeClient
from e2e.realnode import build, host
from e2e.realnode.node import TEST_IMAGE, RealNode, save_logs, start_node, stop_node

POD_TIMEOUT_S = 120.0


def cluster_state_dir(settings: Settings) -> Path:
    return settings.cache_root / "state" / "realnode-cluster"


def start_private_cluster(
    settings: Settings, binary: Path, *, die_with_parent: bool
) -> LocalCluster:
    """The real node's own control plane (never the shared one: other people's pods must not
    land on this node); a stale one left by a crash is stopped first."""
    stale = LocalCluster.load(cluster_state_dir(settings))
    if stale is not None:
        stale.stop()
    return start_cluster(
        binary,
        settings.k8s_version,
        state_dir=cluster_state_dir(settings),
        die_with_parent=die_with_parent,
    )


@contextmanager
def node_and_cluster(
    settings: Settings, *, log: list[str], with_native: bool = False
) -> Iterator[tuple[LocalCluster, RealNode]]:
    """A private control plane plus the real node; both torn down however the block ends.

    ``with_native``: libvgpu.so and the fake driver are built and the CUDA image is imported too.
    """
    binaries = build.ensure_runtime(settings)
    log.append(build.report(binaries))
    native = build.ensure_native(binaries) if with_native else None
    kube = ensure_binary(settings)
    log.append(f"vgpu-k8s (with kubelet): {kube.binary}, reused={kube.reused}")
    started = time.monotonic()
    cluster = start_private_cluster(settings, kube.binary, die_with_parent=True)
    log.append(f"control plane up in {time.monotonic() - started:.1f}s at {cluster.server}")
    try:
        node = start_node(
            cluster, bin_dir=binaries.bin_dir, kubelet_binary=kube.binary, native=native
        )
        try:
            log += [f"{what}: {seconds:.1f}s" for what, seconds in node.timings.items()]
            yield cluster, node
        finally:
            log.append(f"component logs copied to {save_logs(node.layout)}")
            teardown = stop_node(node, cluster.client())
            log += [f"teardown: {line}" for line in teardown.lines()]
            if not teardown.clean:
                raise RuntimeError("teardown left things behind: " + "; ".join(teardown.lines()))
    finally:
        cluster.stop()


def node_pod(name: str, node_name: str, container: Json, *, security: Json | None = None) -> Json:
    """A pod of one container pinned to the real node: host network (no CNI here), nothing
    pulled, runs once, stops at once."""
    spec: Json = {
        "nodeSelector": {"kubernetes.io/hostname": node_name},
        "hostNetwork": True,
        "dnsPolicy": "Default",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [{"imagePullPolicy": "Never", **container}],
    }
    if security is not None:
        spec["securityContext"] = security
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def probe_pod(name: str, node_name: str, *, args: tuple[str, ...] = ()) -> Json:
    return node_pod(name, node_name, {"name": "probe", "image": TEST_IMAGE, "args": list(args)})


@dataclass
class PodRun:
    name: str
    phase: str
    node_name: str
    log: str
    seconds: float
    events: list[str] = field(default_factory=list)

    def values(self) -> dict[str, str]:
        """The probe's ``key=value`` lines."""
        found = {}
        for line in self.log.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                found[key] = value
        return found


def wait_pod_done(
    client: KubeClient, namespace: str, name: str, *, timeout_s: float = POD_TIMEOUT_S
) -> Json:
    """The pod once its phase is Succeeded or Failed (or as it is at the timeout)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    current: Json = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = client.get(path)
        if current.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(0.25)
    return current


def pod_log(node: RealNode, pod: Json, container: str) -> str:
    """A container's output, read from the kubelet's log file on the node (CRI log format)."""
    meta = pod.get("metadata", {})
    directory = f"{meta.get('namespace')}_{meta.get('name')}_{meta.get('uid')}"
    log_file = node.layout.pod_logs / directory / container / "0.log"
    if not log_file.is_file():
        return ""
    # "<time> stdout F <line>"
    lines = log_file.read_text().splitlines()
    return "\n".join(line.split(" ", 3)[3] for line in lines if line.count(" ") >= 3)


def events_of(client: KubeClient, namespace: str, name: str) -> list[str]:
    return [
        f"{e.get('reason')}: {e.get('message')}"
        for e in client.items(
            f"/api/v1/namespaces/{namespace}/events",
            fieldSelector=f"involvedObject.name={name}",
        )
    ]


def run_pod(client: KubeClient, node: RealNode, pod: Json, namespace: str = "default") -> PodRun:
    """Create ``pod``, wait until it Succeeded or Failed, read its log from the node, delete it."""
    name = pod["metadata"]["name"]
    started = time.monotonic()
    client.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    current = wait_pod_done(client, namespace, name)
    run = PodRun(
        name,
        current.get("status", {}).get("phase", "?"),
        current.get("spec", {}).get("nodeName", ""),
        pod_log(node, current, pod["spec"]["containers"][0]["name"]),
        time.monotonic() - started,
        events_of(client, namespace, name),
    )
    delete_and_wait(client, f"/api/v1/namespaces/{namespace}/pods/{name}")
    return run


def delete_and_wait(client: KubeClient, path: str, timeout_s: float = 60.0) -> None:
    """Graceful delete; the real kubelet finishes it. Force after ``timeout_s``."""
    try:
        client.delete(path)
    except ApiError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            client.get(path)
        except ApiError:
            return
        time.sleep(0.25)
    client.delete(path, grace_period_s=0)
    raise TimeoutError(f"{path} not deleted by the kubelet within {timeout_s:.0f}s")


def run_spike(settings: Settings) -> tuple[bool, list[str]]:
    """Steps 1-7 + 9; returns (passed, report lines)."""
    log: list[str] = []
    facts = host.host_facts()
    log += [f"host: {line}" for line in facts.lines()]
    passed = False
    with node_and_cluster(settings, log=log) as (cluster, node):
        client = cluster.client()
        run = run_pod(client, node, probe_pod("spike-probe", node.name, args=("spike",)))
        values = run.values()
        log.append(
            f"pod {run.name}: phase {run.phase} on {run.node_name} in {run.seconds:.1f}s; "
            f"log {values}"
        )
        log += [f"  event {event}" for event in run.events]
        passed = (
            run.phase == "Succeeded"
            and run.node_name == node.name
            and values.get("probe") == "spike"
            and values.get("hostname") == _hostname()
        )
    return passed, log


def _hostname() -> str:
    return Path("/proc/sys/kernel/hostname").read_text().strip()
