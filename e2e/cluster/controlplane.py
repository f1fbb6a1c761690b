"""The local control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler.

All four run from the one multi-call binary (``build.py``), listen on 127.0.0.1 only, and keep
everything (PKI, etcd data, logs, kubeconfig, a ``cluster.json`` with pids and ports) in one state
directory, which ``stop`` removes.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from e2e.cluster import processes
from e2e.cluster.client import KubeClient
from e2e.cluster.kubeconfig import write_kubeconfig
from e2e.cluster.pki import (
    KeyPair,
    create_ca,
    create_service_account_keys,
    issue_client_cert,
    issue_serving_cert,
)
from e2e.cluster.processes import Running

#: On by default from 1.36 (beta; still beta, not locked, in 1.37.2), set explicitly so the cluster
#: never silently drops the fields. Every tested release (settings.TESTED_K8S_VERSIONS) takes it.
FEATURE_GATES = "DRAConsumableCapacity=true"
#: resourceclaim (claims from templates, deallocation), garbage collection (claims go with
#: their pod), namespaces (test namespaces get deleted), deployment and replicaset (workloads
#: admitted by the webhook make pods). No node-lifecycle: no kubelets here.
CONTROLLERS = (
    "resourceclaim-controller,garbage-collector-controller,namespace-controller,"
    "deployment-controller,replicaset-controller"
)
STATE_FILE = "cluster.json"
APISERVER = "kube-apiserver"
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(*processes.free_ports(5))


@dataclass(frozen=True)
class LocalCluster:
    """A started control plane (or one read back from its state directory)."""

    state_dir: Path
    binary: Path
    version: str
    ports: Ports
    components: tuple[Running, ...]

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.state_dir / "pki" / "ca.crt"

    @property
    def ca(self) -> KeyPair:
        return KeyPair(cert=self.ca_file, key=self.state_dir / "pki" / "ca.key")

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def client(self) -> KubeClient:
        admin = KeyPair(self.state_dir / "pki" / "admin.crt", self.state_dir / "pki" / "admin.key")
        return KubeClient("127.0.0.1", self.ports.apiserver, self.ca_file, admin)

    def logs(self) -> dict[str, Path]:
        return {component.name: component.log for component in self.components}

    def healthy(self) -> bool:
        return all(c.alive() for c in self.components) and self.client().healthy()

    def stop(self) -> None:
        """Stop every component (reverse start order) and delete the state directory. The state
        file names the processes running now (a restarted API server is a new one)."""
        current = LocalCluster.load(self.state_dir) or self
        for component in reversed(current.components):
            processes.stop(component)
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def restart_apiserver(
        self,
        *,
        down_s: float,
        while_down: Callable[[], object] = lambda: None,
        die_with_parent: bool = True,
    ) -> LocalCluster:
        """An API server outage: kube-apiserver killed (a crash: its connections are reset at
        once; a SIGTERM'd one here waits out the whole 10 s grace for its watches), left down
        `down_s` (`while_down` runs first in that time), then started again with the same flags,
        port, certificates and etcd, and waited for. Returns the cluster with the new process,
        also saved to the state file (which `stop` and a later restart read); its log goes on in
        the same file."""
        old = self._component(APISERVER)
        processes.stop(old, grace_s=0.0)
        down_until = time.monotonic() + down_s
        try:
            while_down()
        finally:  # never left down
            time.sleep(max(0.0, down_until - time.monotonic()))
            restarted = self._start_apiserver(log=old.log, die_with_parent=die_with_parent)
        return restarted

    def _start_apiserver(self, *, log: Path, die_with_parent: bool) -> LocalCluster:
        argv = next(argv for name, argv, _ in _plan(self) if name == APISERVER)
        new = processes.start(APISERVER, [str(self.binary), APISERVER, *argv], log=log,
                              die_with_parent=die_with_parent)  # fmt: skip
        current = LocalCluster.load(self.state_dir) or self
        components = tuple(new if c.name == APISERVER else c for c in current.components)
        restarted = replace(current, components=components)
        restarted.save()
        processes.wait_until(lambda: restarted.client().healthy("/readyz"),
                             timeout_s=START_TIMEOUT_S, what=APISERVER, watch=(new,))  # fmt: skip
        return restarted

    @contextlib.contextmanager
    def apiserver_paused(self) -> Iterator[None]:
        """An API server that hangs instead of refusing: kube-apiserver stopped (SIGSTOP) for the
        block, so connections open and requests wait unanswered, then continued (SIGCONT)."""
        component = self._component(APISERVER)
        processes.send_signal(component, signal.SIGSTOP)
        try:
            yield
        finally:
            processes.send_signal(component, signal.SIGCONT)

    def _component(self, name: str) -> Running:
        """The component running now, as the state file names it."""
        current = LocalCluster.load(self.state_dir) or self
        return next(c for c in current.components if c.name == name)

    def save(self) -> None:
        state = {
            "binary": str(self.binary),
            "version": self.version,
            "ports": asdict(self.ports),
            "components": [
                {
                    "name": c.name,
                    "pid": c.pid,
                    "log": str(c.log),
                    "binary": str(c.binary),
                    "started": c.started,
                }
                for c in self.components
            ],
        }
        (self.state_dir / STATE_FILE).write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, state_dir: Path) -> LocalCluster | None:
        """The cluster recorded in ``state_dir``, or None if there is none."""
        try:
            state = json.loads((state_dir / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        components = tuple(
            Running(
                c["name"], int(c["pid"]), Path(c["log"]), Path(c["binary"]), c.get("started", -1)
            )
            for c in state["components"]
        )
        return cls(
            state_dir=state_dir,
            binary=Path(state["binary"]),
            version=state["version"],
            ports=Ports(**state["ports"]),
            components=components,
        )


def start_cluster(
    binary: Path, version: str, *, state_dir: Path, die_with_parent: bool
) -> LocalCluster:
    """Start all four components in ``state_dir`` (created; must not hold a cluster) and wait."""
    state_dir.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(state_dir, binary, version, Ports.pick(), components=())
    _write_pki(cluster)
    try:
        for name, argv, ready in _plan(cluster):
            component = processes.start(
                name,
                [str(binary), name, *argv],
                log=state_dir / "logs" / f"{name}.log",
                die_with_parent=die_with_parent,
            )
            cluster = _with(cluster, component)
            cluster.save()
            processes.wait_until(
                ready, timeout_s=START_TIMEOUT_S, what=name, watch=cluster.components
            )
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _with(cluster: LocalCluster, component: Running) -> LocalCluster:
    return LocalCluster(
        cluster.state_dir,
        cluster.binary,
        cluster.version,
        cluster.ports,
        (*cluster.components, component),
    )


def _write_pki(cluster: LocalCluster) -> None:
    pki = cluster.state_dir / "pki"
    ca = create_ca(pki)
    hosts = ("127.0.0.1", "localhost", "10.0.0.1", "kubernetes", "kubernetes.default.svc")
    issue_serving_cert(ca, pki, "apiserver", hosts=hosts)
    admin = issue_client_cert(ca, pki, "admin", user="admin", groups=("system:masters",))
    create_service_account_keys(pki)
    write_kubeconfig(cluster.kubeconfig, server=cluster.server, ca_file=ca.files.cert, client=admin)


def _plan(cluster: LocalCluster) -> list[tuple[str, list[str], Callable[[], bool]]]:
    """Each component's flags and the check that says it is up, in start order."""
    d, p = cluster.state_dir, cluster.ports
    etcd_url = f"http://127.0.0.1:{p.etcd_client}"
    peer_url = f"http://127.0.0.1:{p.etcd_peer}"
    etcd = [
        "--name=e2e",
        f"--data-dir={d / 'etcd'}",
        f"--listen-client-urls={etcd_url}",
        f"--advertise-client-urls={etcd_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=e2e={peer_url}",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]
    apiserver = [
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={p.apiserver}",
        f"--tls-cert-file={d / 'pki' / 'apiserver.crt'}",
        f"--tls-private-key-file={d / 'pki' / 'apiserver.key'}",
        f"--client-ca-file={d / 'pki' / 'ca.crt'}",
        f"--cert-dir={d / 'apiserver'}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction,MutatingAdmissionWebhook,"
        "ValidatingAdmissionWebhook",
        "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={d / 'pki' / 'sa.pub'}",
        f"--service-account-signing-key-file={d / 'pki' / 'sa.key'}",
        "--endpoint-reconciler-type=none",
        f"--feature-gates={FEATURE_GATES}",
    ]
    common = [
        f"--kubeconfig={cluster.kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--feature-gates={FEATURE_GATES}",
        "--kube-api-qps=200",
        "--kube-api-burst=400",
    ]
    controller_manager = [
        *common,
        f"--secure-port={p.controller_manager}",
        f"--controllers={CONTROLLERS}",
        "--concurrent-gc-syncs=5",
    ]
    scheduler = [*common, f"--secure-port={p.scheduler}"]
    return [
        ("etcd", etcd, lambda: _http_ok(f"{etcd_url}/health")),
        (APISERVER, apiserver, lambda: cluster.client().healthy("/readyz")),
        ("kube-controller-manager", controller_manager, lambda: _https_ok(p.controller_manager)),
        ("kube-scheduler", scheduler, lambda: _https_ok(p.scheduler)),
    ]


def _http_ok(url: str) -> bool:
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)
    return False


def _https_ok(port: int) -> bool:
    """``/healthz`` of a component serving a self-signed certificate (loopback; not verified)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with contextlib.suppress(OSError):
        url = f"https://127.0.0.1:{port}/healthz"
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    return False
