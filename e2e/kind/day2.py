"""Day-two operations on the kind cluster (issue 38), shared by ``scenarios_day2.py`` (the fast
cases in ``make e2e-kind``) and ``bench/day2.py`` (the full set under load, with figures).

Each helper is one thing an operator does or looks at: install a given chart (this tree's or the
previous release's), stop the API server or slow etcd on the control-plane node, restart a node
container, SIGKILL one webhook replica, list what of ours is left in the cluster and on a node,
hash the files the agent wrote for running containers.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.kind import dockerd, network
from e2e.kind.cluster import CHART, NAMESPACE, NAMESPACE_LABELS, RELEASE, VALUES, Kind
from e2e.kind.steps import run
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi, KubeError

Json = dict[str, Any]
RESOURCE = "/apis/resource.k8s.io/v1"
WEBHOOK = "app.kubernetes.io/component=webhook"
AGENT = "app.kubernetes.io/component=agent"
VGPU_DIR = "/usr/local/vgpu"  # the chart's agent.vgpuDir default
CDI_DIR = "/var/run/cdi"
PLUGIN_DIR = f"/var/lib/kubelet/plugins/{DEFAULT.driver}"
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
MANIFESTS = "/etc/kubernetes/manifests"
APISERVER_MANIFEST = "kube-apiserver.yaml"
APISERVER_PARKED = "/etc/kubernetes/kube-apiserver.yaml.day2"
#: the files of ours a running share has on its node: its CDI spec and its limits file
SHARE_FILES = f"{CDI_DIR}/*{DEFAULT.driver}* {VGPU_DIR}/limits"


# --- commands on nodes ---------------------------------------------------------------------------


def node_sh(node: str, script: str, *, check: bool = True) -> str:
    """``sh -c script`` in a kind node container; its stdout."""
    done = subprocess.run(
        ["docker", "exec", node, "sh", "-c", script],
        env=dockerd.docker_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{node}: {script}: exit {done.returncode}: {done.stderr[-500:]}")
    return done.stdout


def share_file_hashes(node: str) -> dict[str, str]:
    """sha256 of each CDI spec of our driver and each limits file on ``node``, by path."""
    out = node_sh(
        node,
        f"find {SHARE_FILES} -type f -exec sha256sum {{}} + 2>/dev/null || true",
    )
    hashes = {}
    for line in out.splitlines():
        digest, _, path = line.partition("  ")
        if path:
            hashes[path] = digest
    return hashes


def ours_on_node(node: str) -> list[str]:
    """Every path of ours on ``node``: CDI specs of our driver, the vgpu dir's contents (limits
    files, claim dirs, priority dir, libvgpu.so), the plugin dir's (checkpoint, socket), the
    registration socket. Goal after an uninstall: none. The vgpu and plugin dirs themselves are
    the agent's hostPath mounts, which it cannot remove (EBUSY): ``empty_mount_dirs``."""
    script = (
        f"ls -d {CDI_DIR}/*{DEFAULT.driver}* {VGPU_DIR}/* {PLUGIN_DIR}/*"
        f" {REGISTRY_DIR}/{DEFAULT.driver}* 2>/dev/null || true"
    )
    return sorted(node_sh(node, script).split())


def empty_mount_dirs(node: str) -> list[str]:
    """The agent's hostPath directories still on ``node`` (empty once it cleaned up)."""
    return sorted(node_sh(node, f"ls -d {VGPU_DIR} {PLUGIN_DIR} 2>/dev/null || true").split())


def ours_in_cluster(api: KubeApi) -> list[str]:
    """What of ours the API still holds after an uninstall: claim templates and claims of our
    class, slices of our driver, our DeviceClass, webhook and admission-policy configurations,
    and anything left in the chart's namespace (pods, secrets but the service account's)."""
    found = []
    for kind_ in ("resourceclaimtemplates", "resourceclaims"):
        for item in api.list(f"{RESOURCE}/{kind_}")["items"]:
            if DEFAULT.device_class in yaml.safe_dump(item.get("spec", {})):
                meta = item["metadata"]
                found.append(f"{kind_}/{meta['namespace']}/{meta['name']}")
    slices = api.list(f"{RESOURCE}/resourceslices", fieldSelector=f"spec.driver={DEFAULT.driver}")
    found += [f"resourceslices/{s['metadata']['name']}" for s in slices["items"]]
    for path, kind_ in (
        (f"{RESOURCE}/deviceclasses", "deviceclasses"),
        ("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", "mutating"),
        ("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", "validating"),
        ("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", "policies"),
        ("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", "bindings"),
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", "clusterroles"),
    ):
        for item in api.list(path)["items"]:
            if "vgpu" in item["metadata"]["name"]:
                found.append(f"{kind_}/{item['metadata']['name']}")
    for kind_ in ("pods", "secrets", "configmaps", "services"):
        for item in api.list(f"/api/v1/namespaces/{NAMESPACE}/{kind_}")["items"]:
            name = item["metadata"]["name"]
            if name != "kube-root-ca.crt":
                found.append(f"{kind_}/{NAMESPACE}/{name}")
    return found


# --- the chart -----------------------------------------------------------------------------------


def helm(kind: Kind, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [str(kind.helm), *args, "--kubeconfig", str(kind.kubeconfig)]
    print("+", " ".join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)}: exit {done.returncode}: {done.stderr[-2000:]}")
    return done


def namespace_ready(kind: Kind) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": NAMESPACE_LABELS},
    }
    run([*kind.kubectl, "apply", "-f", "-"], input_text=yaml.safe_dump(body))


def install_chart(
    kind: Kind, chart: Path = CHART, *extra: str, wait: bool = True, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``helm upgrade --install`` of ``chart`` (this tree's unless given) with the kind values."""
    namespace_ready(kind)
    waiting = ["--wait", "--timeout", "5m"] if wait else []
    return helm(
        kind,
        "upgrade",
        "--install",
        RELEASE,
        str(chart),
        "--namespace",
        NAMESPACE,
        "--values",
        str(VALUES),
        *waiting,
        *extra,
        check=check,
    )


def uninstall(kind: Kind, *extra: str, wait: bool = True) -> subprocess.CompletedProcess[str]:
    waiting = ["--wait", "--timeout", "5m"] if wait else []
    return helm(kind, "uninstall", RELEASE, "--namespace", NAMESPACE, *waiting, *extra, check=False)


def installed(kind: Kind) -> bool:
    done = helm(kind, "status", RELEASE, "--namespace", NAMESPACE, check=False)
    return done.returncode == 0


def roll_chart_pods(kind: Kind) -> None:
    """``kubectl rollout restart`` of the webhook and the agent, waited: images rebuilt under
    the same tag (pullPolicy Never) reach the pods only so."""
    for workload in (f"deployment/{RELEASE}-webhook", f"daemonset/{RELEASE}-agent"):
        run([*kind.kubectl, "-n", NAMESPACE, "rollout", "restart", workload])
        run([*kind.kubectl, "-n", NAMESPACE, "rollout", "status", workload, "--timeout=300s"])


# --- the chart's pods ----------------------------------------------------------------------------


def pods(api: KubeApi, selector: str) -> list[Json]:
    items: list[Json] = api.list(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=selector)[
        "items"
    ]
    return items


def restart_counts(api: KubeApi) -> dict[str, int]:
    """Container restarts of each chart pod, by pod name."""
    return {
        p["metadata"]["name"]: sum(
            c.get("restartCount", 0) for c in p.get("status", {}).get("containerStatuses") or []
        )
        for p in pods(api, "app.kubernetes.io/instance=" + RELEASE)
    }


def ready(item: Json) -> bool:
    conditions = item.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def webhook_ready_endpoints(api: KubeApi) -> int:
    """Ready endpoints behind the webhook's Service: what the API server may call."""
    slices = api.list(
        f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
        labelSelector=f"kubernetes.io/service-name={RELEASE}-webhook",
    )["items"]
    return sum(1 for s in slices for e in s.get("endpoints") or [] if e["conditions"].get("ready"))


def agent_on(api: KubeApi, node: str) -> Json | None:
    found = [p for p in pods(api, AGENT) if p["spec"].get("nodeName") == node]
    return found[0] if found else None


def wait_agent_ready(api: KubeApi, node: str, *, not_uid: str = "", timeout_s: float = 300) -> Json:
    """The agent pod on ``node`` Ready (another than ``not_uid`` when given)."""

    def agent_ready() -> Json | None:
        agent = agent_on(api, node)
        if agent is None or agent["metadata"]["uid"] == not_uid or not ready(agent):
            return None
        return agent

    return wait_for(agent_ready, timeout_s=timeout_s, what=f"agent Ready on {node}", interval_s=1)


def webhook_pid(node: str) -> int | None:
    """The pid (in the node's pid namespace) of a webhook process on ``node``."""
    # [v]: the pattern must not match the shell running pgrep, whose command line holds it
    out = node_sh(node, "pgrep -f '[v]gpu_bridge.cli webhook' || true").split()
    return int(out[0]) if out else None


def sigkill_one_webhook(api: KubeApi) -> str:
    """SIGKILL the process of one webhook replica (not a pod delete: no SIGTERM, no drain);
    the pod's name."""
    for replica in pods(api, WEBHOOK):
        node = replica["spec"].get("nodeName")
        pid = webhook_pid(node) if node else None
        if pid is not None and ready(replica):
            node_sh(node, f"kill -KILL {pid}")
            return str(replica["metadata"]["name"])
    raise RuntimeError("no Ready webhook replica with a process found")


# --- the control plane ---------------------------------------------------------------------------


def control_plane(kind: Kind) -> str:
    return f"{kind.name}-control-plane"


def apiserver_answers(api: KubeApi) -> bool:
    try:
        api.get_text("/readyz")  # text ("ok"), not JSON
    except KubeError:
        return False
    except Exception:
        return False
    return True


@contextmanager
def apiserver_stopped(kind: Kind, api: KubeApi) -> Iterator[dict[str, float]]:
    """The kube-apiserver static pod's manifest moved out of the kubelet's manifest dir (the
    kubelet stops it) and put back after; times (monotonic) of down and back in the dict."""
    node = control_plane(kind)
    times: dict[str, float] = {"parked": time.monotonic()}
    node_sh(node, f"mv {MANIFESTS}/{APISERVER_MANIFEST} {APISERVER_PARKED}")
    try:
        wait_for(
            lambda: not apiserver_answers(api),
            timeout_s=120,
            what="API server down",
            interval_s=0.5,
        )
        times["down"] = time.monotonic()
        yield times
    finally:
        node_sh(node, f"mv {APISERVER_PARKED} {MANIFESTS}/{APISERVER_MANIFEST}")
        times["restored"] = time.monotonic()
    wait_for(lambda: apiserver_answers(api), timeout_s=300, what="API server back", interval_s=0.5)
    times["back"] = time.monotonic()


def etcd_pause(kind: Kind, seconds: float) -> None:
    """SIGSTOP etcd on the control-plane node for ``seconds``, then SIGCONT (always)."""
    node = control_plane(kind)
    pid = node_sh(node, "pgrep -f '[v]gpu-k8s etcd' | head -1").strip()
    node_sh(node, f"kill -STOP {pid}")
    try:
        time.sleep(seconds)
    finally:
        node_sh(node, f"kill -CONT {pid}")


# --- a node reboot -------------------------------------------------------------------------------


def node_address(node: str) -> str:
    fmt = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
    return run(["docker", "inspect", "-f", fmt, node], env=dockerd.docker_env(), quiet=True).strip()


@dataclass(frozen=True)
class Reboot:
    address_before: str
    address_after: str
    node_ready_s: float


def reboot(api: KubeApi, node: str) -> Reboot:
    """``docker restart`` of a node container (its kubelet, containerd and the agent restart;
    /run and so /var/run/cdi are a tmpfs in a kind node: cleared), then the routes to the other
    nodes' pod ranges written again (``network.wire``: a restarted node has a new network
    namespace; kindnetd would do the same), and the node Ready."""
    before = node_address(node)
    started = time.monotonic()
    run(["docker", "restart", node], env=dockerd.docker_env())
    after = node_address(node)
    network.wire(api)

    def node_ready() -> bool:
        return ready(api.get(f"/api/v1/nodes/{node}"))

    wait_for(node_ready, timeout_s=300, what=f"{node} Ready after restart", interval_s=1)
    return Reboot(before, after, round(time.monotonic() - started, 1))


def run_docker(*args: str) -> None:
    run(["docker", *args], env=dockerd.docker_env())


def rewire(api: KubeApi) -> None:
    """Routes to the other nodes' pod ranges again (a restarted node container starts with a
    fresh network namespace; kindnetd, which this tier does not run, would do this)."""
    network.wire(api)
