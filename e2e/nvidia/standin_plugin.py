"""A stand-in for NVIDIA's GPU kubelet plugin (driver ``gpu.nvidia.com``) on the real node.

NVIDIA's plugin cannot run in `make test` (it needs a checkout of its source: the real one runs in
`make e2e-nvidia`), so this plays it against the real kubelet with NVIDIA's published behaviour at
95932046 (docs/reference/nvidia-dra-driver.md §1, §3, §4), not ours:

- it registers through the kubelet's plugin registry as ``gpu.nvidia.com`` and serves DRAPlugin
  on ``<kubelet>/plugins/gpu.nvidia.com/dra.sock``;
- it publishes the node's slice as NVIDIA's plugin does in the given ``--consumable-shares`` mode
  (e2e/nvidia/slices.py);
- on NodePrepareResources it re-reads each claim from the API (the kubeletplugin helper does;
  the gRPC message carries no results), takes only the results whose driver is
  ``gpu.nvidia.com`` (other drivers' are ignored), writes one transient CDI spec per claim,
  ``<cdi>/k8s.gpu.nvidia.com-claim_<uid>.yaml`` (cdiVersion 0.5.0, kind
  ``k8s.gpu.nvidia.com/claim``, a device ``<uid>-gpu-<minor>`` holding the card's
  ``/dev/nvidia<minor>``; common edits ``NVIDIA_VISIBLE_DEVICES=void``,
  ``NVIDIA_CTK_LIBCUDA_DIR``, the control device nodes and the driver's libraries and
  nvidia-smi mounted read-only from its driver root), and answers one device per own result with
  ``request_names=[result.request]`` and no share id; it is idempotent per claim;
- NodeUnprepareResources deletes that spec.

What differs, on purpose: NVIDIA's spec runs ``nvidia-cdi-hook`` (create-symlinks,
update-ldcache, ...), which needs NVIDIA's toolkit on the node; here the SONAME links the hook
would create are mounted as the files they name. The device nodes are char nodes (195:<minor>,
195:255, 510:0, 510:1) made with mknod under the tier's own dir, since the node has no GPU.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import yaml

from e2e.cluster.client import ApiError, Json, KubeClient
from e2e.nvidia.slices import NVIDIA_DRIVER, NvidiaCard, nvidia_resource_slice
from vgpu_bridge.node.grpc import DRA_VERSIONS, Registration
from vgpu_bridge.node.kubeletapi import pluginregistration_v1_pb2_grpc as registration_grpc

RESOURCE = "/apis/resource.k8s.io/v1"
CDI_VERSION = "0.5.0"
CDI_KIND = "k8s.gpu.nvidia.com/claim"
NVIDIA_MAJOR = 195
#: NVIDIA's control nodes (path in the container, major, minor)
CONTROL_NODES = (("/dev/nvidiactl", 195, 255), ("/dev/nvidia-uvm", 510, 0),
                 ("/dev/nvidia-uvm-tools", 510, 1))  # fmt: skip
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    """NVIDIA's transient spec name (cdiapi.GenerateTransientSpecName, yaml)."""
    return cdi_dir / f"k8s.gpu.nvidia.com-claim_{claim_uid}.yaml"


@dataclass(frozen=True)
class DriverFiles:
    """What NVIDIA's spec mounts from its driver root: ``driver_root`` as the host sees it,
    ``library_dir`` and ``binaries`` as paths inside it (also their paths in the container)."""

    driver_root: Path
    library_dir: str  # e.g. usr/lib/x86_64-linux-gnu
    binaries: tuple[str, ...] = ("usr/bin/nvidia-smi",)

    def mounts(self) -> list[Json]:
        """Each library file of the library dir (links as the files they name, the hook's part),
        then each binary; read-only as NVIDIA mounts them."""
        top = self.driver_root / self.library_dir
        files = sorted(p.relative_to(self.driver_root) for p in top.iterdir() if p.is_file())
        return [
            {"hostPath": str((self.driver_root / rel).resolve()), "containerPath": f"/{rel}",
             "options": MOUNT_OPTIONS}
            for rel in [*files, *(Path(b) for b in self.binaries)]
        ]  # fmt: skip


class NvidiaStandIn:
    """The stand-in plugin for one node; `start`, then `stop` (which leaves the claims' specs
    to Unprepare, as NVIDIA's plugin does)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        node: str,
        cards: list[NvidiaCard],
        kubelet_dir: Path,
        cdi_dir: Path,
        dev_dir: Path,
        files: DriverFiles,
        consumable_shares: str = "100",
    ) -> None:
        self._client = client
        self.node = node
        self._cards = {card.device_name: card for card in cards}
        self.cdi_dir = cdi_dir
        self.dev_dir = dev_dir
        self._files = files
        self._mode = consumable_shares
        self.dra_socket = kubelet_dir / "plugins" / NVIDIA_DRIVER / "dra.sock"
        self.registration_socket = kubelet_dir / "plugins_registry" / f"{NVIDIA_DRIVER}-reg.sock"
        self.registration = Registration(driver=NVIDIA_DRIVER, endpoint=self.dra_socket)
        self._prepared: dict[str, list[Json]] = {}
        self._lock = threading.Lock()
        self._slice: str | None = None
        self._servers: list[grpc.Server] = []
        #: every claim uid prepared so far, and every one unprepared (for the tests)
        self.prepare_calls: list[str] = []
        self.unprepare_calls: list[str] = []

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self._make_device_nodes()
        node_uid = self._client.get(f"/api/v1/nodes/{self.node}")["metadata"]["uid"]
        body = nvidia_resource_slice(
            self.node, list(self._cards.values()), self._mode, node_uid=node_uid
        )
        self._slice = self._client.create(f"{RESOURCE}/resourceslices", body)["metadata"]["name"]
        dra = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        for _, messages, services in DRA_VERSIONS:
            services.add_DRAPluginServicer_to_server(_Servicer(self, messages), dra)
        registrar = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        registration_grpc.add_RegistrationServicer_to_server(self.registration, registrar)
        for server, socket in ((dra, self.dra_socket), (registrar, self.registration_socket)):
            socket.parent.mkdir(parents=True, exist_ok=True)
            socket.unlink(missing_ok=True)
            server.add_insecure_port(f"unix:{socket}")
            server.start()
            self._servers.append(server)

    def stop(self) -> None:
        for server in reversed(self._servers):
            server.stop(2).wait()
        self._servers.clear()
        self.registration_socket.unlink(missing_ok=True)
        self.dra_socket.unlink(missing_ok=True)
        if self._slice is not None:
            try:
                self._client.delete(f"{RESOURCE}/resourceslices/{self._slice}")
            except ApiError as error:
                if error.status != 404:
                    raise
            self._slice = None

    def device_node(self, card: NvidiaCard) -> Path:
        return self.dev_dir / f"nvidia{card.minor}"

    def _make_device_nodes(self) -> None:
        self.dev_dir.mkdir(parents=True, exist_ok=True)
        nodes = [(f"/dev/nvidia{c.minor}", NVIDIA_MAJOR, c.minor) for c in self._cards.values()]
        for path, major, minor in [*nodes, *CONTROL_NODES]:
            host = self.dev_dir / Path(path).name
            if not host.exists():
                os.mknod(host, stat.S_IFCHR | 0o666, os.makedev(major, minor))

    # --- NVIDIA's Prepare and Unprepare -----------------------------------------------------

    def prepare(self, namespace: str, name: str, uid: str) -> list[Json]:
        """The devices of the claim's own results (a list of Device fields); raises with the
        reason the kubelet is told."""
        with self._lock:
            self.prepare_calls.append(uid)
            if uid in self._prepared:  # PrepareCompleted: the checkpointed devices
                return self._prepared[uid]
            claim = self._client.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")
            if claim["metadata"]["uid"] != uid:
                raise ValueError(f"claim {namespace}/{name}: uid is not {uid}")
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation is None:
                raise ValueError(f"claim {namespace}/{name} is not allocated")
            own = [r for r in allocation["devices"]["results"] if r["driver"] == NVIDIA_DRIVER]
            for result in own:
                if result["pool"] != self.node or result["device"] not in self._cards:
                    raise ValueError(f"no device {result['pool']}/{result['device']} here")
            _write_yaml(spec_path(self.cdi_dir, uid), self._spec(uid, own))
            devices = [
                {
                    "request_names": [result["request"]],
                    "pool_name": result["pool"],
                    "device_name": result["device"],
                    "cdi_device_ids": [f"{CDI_KIND}={uid}-{result['device']}"],
                }
                for result in own
            ]
            self._prepared[uid] = devices
            return devices

    def unprepare(self, uid: str) -> None:
        with self._lock:
            self.unprepare_calls.append(uid)
            spec_path(self.cdi_dir, uid).unlink(missing_ok=True)
            self._prepared.pop(uid, None)

    def _spec(self, uid: str, results: Iterable[Json]) -> Json:
        devices = []
        for result in results:
            card = self._cards[result["device"]]
            node = {"path": f"/dev/nvidia{card.minor}", "hostPath": str(self.device_node(card))}
            devices.append(
                {"name": f"{uid}-{card.device_name}", "containerEdits": {"deviceNodes": [node]}}
            )
        control = [
            {"path": path, "hostPath": str(self.dev_dir / Path(path).name)}
            for path, _, _ in CONTROL_NODES
        ]
        return {
            "cdiVersion": CDI_VERSION,
            "kind": CDI_KIND,
            "devices": devices,
            "containerEdits": {
                "env": [
                    "NVIDIA_VISIBLE_DEVICES=void",
                    f"NVIDIA_CTK_LIBCUDA_DIR=/{self._files.library_dir}",
                ],
                "deviceNodes": control,
                "mounts": self._files.mounts(),
            },
        }


def _write_yaml(path: Path, body: Json) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(yaml.safe_dump(body, sort_keys=False))
    partial.chmod(0o644)
    partial.replace(path)


class _Servicer:
    """DRAPlugin of one API version over the stand-in: errors per claim, as NVIDIA answers."""

    def __init__(self, plugin: NvidiaStandIn, messages: ModuleType) -> None:
        self._plugin = plugin
        self._messages = messages

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC's name
        response = self._messages.NodePrepareResourcesResponse()
        for claim in request.claims:
            entry = response.claims[claim.uid]
            try:
                devices = self._plugin.prepare(claim.namespace, claim.name, claim.uid)
            except (ValueError, ApiError) as error:
                entry.error = f"prepare of gpu.nvidia.com failed: {error}"
                continue
            entry.devices.extend(self._messages.Device(**device) for device in devices)
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC's name
        response = self._messages.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            self._plugin.unprepare(claim.uid)
            response.claims[claim.uid].error = ""
        return response
