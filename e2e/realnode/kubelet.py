"""The real kubelet's configuration and credentials (shared/reference/realnode.md §4).

The kubelet is ``vgpu-k8s kubelet`` (the control plane's multi-call binary). It authenticates as
``system:node:<name>`` in ``system:nodes`` with a client certificate from the cluster's CA, so the
apiserver's Node authorizer and NodeRestriction treat it as that node. What this VM needs:
``failCgroupV1: false`` (cgroup v1 host), the cgroupfs driver under the node's own cgroup root,
no iptables chains, eviction thresholds low enough for a busy shared disk, pinned images never
collected, and everything in the node's own directories.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from e2e.cluster.controlplane import LocalCluster
from e2e.cluster.kubeconfig import write_kubeconfig
from e2e.cluster.pki import issue_client_cert, load_ca
from e2e.realnode.host import Layout

NODE_NAME = "vgpu-realnode"


def render_config(layout: Layout, *, port: int, healthz_port: int, ca_file: Path) -> str:
    """KubeletConfiguration (v1beta1) for this VM."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": layout.cgroup_root,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "failSwapOn": False,
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "makeIPTablesUtilChains": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "200Mi",
            "imagefs.available": "200Mi",
        },
        "podLogsDir": str(layout.pod_logs),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_file)},
        },
        # the kubelet listens on 127.0.0.1 only; client certs of the cluster's CA are accepted
        "authorization": {"mode": "AlwaysAllow"},
        "resolvConf": "/etc/resolv.conf",
        "registerNode": True,
        "serializeImagePulls": False,
        "nodeStatusReportFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "5s",
        "shutdownGracePeriod": "0s",
        "maxPods": 20,
    }
    return yaml.safe_dump(config, sort_keys=False)


def write_credentials(cluster: LocalCluster, layout: Layout, node_name: str = NODE_NAME) -> Path:
    """A kubeconfig that authenticates as the node (Node authorizer identity); returns its path."""
    pki = layout.etc / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    ca = load_ca(cluster.ca)
    pair = issue_client_cert(
        ca, pki, "kubelet", user=f"system:node:{node_name}", groups=("system:nodes",)
    )
    path = layout.etc / "kubelet.kubeconfig"
    write_kubeconfig(path, server=cluster.server, ca_file=cluster.ca_file, client=pair)
    return path


def argv(
    binary: Path, layout: Layout, *, config: Path, kubeconfig: Path, node_name: str = NODE_NAME
) -> list[str]:
    return [
        str(binary),
        "kubelet",
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_dir}",
        f"--cert-dir={layout.kubelet_dir / 'pki'}",
        f"--hostname-override={node_name}",
        "--v=2",
    ]
