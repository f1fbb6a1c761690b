"""Pod networking without kindnetd (not served as a Go module): what kindnetd would set up.

Each node gets a ``ptp`` + ``host-local`` conflist on its own ``spec.podCIDR`` (kindnetd's
shape: every pod's traffic is routed through the node, so kube-proxy's rules see it) and a route
to every other node's pod range via that node's address on kind's Docker network (one L2
bridge: no encapsulation, no masquerading).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from e2e.kind.dockerd import docker_env
from e2e.kind.steps import run
from vgpu_bridge.kube import KubeApi

CONFLIST = "/etc/cni/net.d/10-vgpu-kind.conflist"


@dataclass(frozen=True)
class NodeNet:
    name: str
    address: str
    pod_cidr: str


def node_nets(api: KubeApi) -> list[NodeNet]:
    nets = []
    for node in api.list("/api/v1/nodes")["items"]:
        addresses = node["status"].get("addresses") or []
        internal = next(a["address"] for a in addresses if a["type"] == "InternalIP")
        nets.append(NodeNet(node["metadata"]["name"], internal, node["spec"]["podCIDR"]))
    return nets


def conflist(pod_cidr: str) -> str:
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "vgpu-kind",
            "plugins": [
                {
                    "type": "ptp",
                    "ipMasq": False,
                    "mtu": 1500,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": "/run/cni-ipam-state",
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "ranges": [[{"subnet": pod_cidr}]],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def wire(api: KubeApi) -> list[NodeNet]:
    """Write every node's conflist and routes to the others' pod ranges."""
    nets = node_nets(api)
    env = docker_env()
    for node in nets:
        write = ["docker", "exec", "-i", node.name, "sh", "-c", f"cat > {CONFLIST}"]
        run(write, env=env, input_text=conflist(node.pod_cidr))
        for other in nets:
            if other.name != node.name:
                route = ["ip", "route", "replace", other.pod_cidr, "via", other.address]
                run(["docker", "exec", node.name, *route], env=env)
    return nets
