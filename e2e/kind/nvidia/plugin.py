"""NVIDIA's GPU kubelet plugin on kind: its image, built offline, and what NVIDIA's chart
(``deployments/helm/dra-driver-nvidia-gpu`` at the checked commit) renders for it with
``featureGates.ConsumableShares=true``, ``consumableShares=100`` and ``nvidiaDriverRoot`` set:
the kubelet-plugin DaemonSet's ``gpus`` container (same env, kubelet dirs, CDI root and mounts),
its service account and cluster role, and the ``gpu.nvidia.com`` DeviceClass (with
``extendedResourceName: nvidia.com/gpu``, as on a ``resource.k8s.io/v1`` cluster).

Left out, and why: the init container that waits for a driver (the mock root is there before
the pod), the compute-domain container and controller (no IMEX here), the chart's validating
policy on its own service account and its optional webhook (neither reads our objects). The
DaemonSet selects the worker that holds the mock driver root (``MOCK_NODE_LABEL``), as NVIDIA's
chart selects GPU nodes by label.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from e2e.cluster.settings import Settings
from e2e.kind.dockerd import docker_env
from e2e.kind.nvidia.driverroot import DRIVER_ROOT
from e2e.kind.rootfs import ensure_rootfs_image
from e2e.kind.steps import run

Json = dict[str, Any]
DRIVER = "gpu.nvidia.com"
NAMESPACE = "nvidia-dra-driver-gpu"
NAME = "nvidia-dra-driver-gpu-kubelet-plugin"
ACCOUNT = "nvidia-dra-driver-gpu-service-account-kubeletplugin"
CONSUMABLE_SHARES = "100"
FEATURE_GATES = "ConsumableShares=true"
#: the hook NVIDIA's CDI specs call; the mock driver has nothing to link or cache, and
#: ``--nvidia-cdi-hook-path`` stops the plugin from looking for its own copy in the image
CDI_HOOK = "/bin/true"
MOCK_NODE_LABEL = "vgpu-bridge.io/nvidia-mock"
DOCKERFILE = Path(__file__).resolve().parent / "Dockerfile.gpu-kubelet-plugin"
PLUGINS_DIR = "/var/lib/kubelet/plugins"
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
CDI_DIR = "/var/run/cdi"


def image_name(plugin_digest: str) -> str:
    return f"vgpu-bridge-kind/nvidia-gpu-kubelet-plugin:{plugin_digest[:12]}"


def build_image(settings: Settings, plugin: Path, tag: str) -> str:
    """``docker build`` of the plugin's image on the local Debian base (only a COPY)."""
    context = settings.cache_root / "kind-nvidia-context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    try:
        shutil.copy2(plugin, context / "gpu-kubelet-plugin")
        base = f"--build-arg=BASE_IMAGE={ensure_rootfs_image(settings, 'python')}"
        command = ["docker", "build", base, "--network=none", "-t", tag, "-f", str(DOCKERFILE)]
        run([*command, str(context)], env=docker_env())
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return tag


def device_class() -> Json:
    """``gpu.nvidia.com`` as NVIDIA's chart renders it for resource.k8s.io/v1."""
    selector = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {
            "selectors": [{"cel": {"expression": selector}}],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }


def rbac() -> list[Json]:
    """The namespace (privileged: host paths, Bidirectional mounts), the plugin's account and
    the cluster role NVIDIA's chart gives it (less compute domains)."""
    labels = {"pod-security.kubernetes.io/enforce": "privileged"}
    rules = [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
         "verbs": ["get", "list", "watch", "create", "update", "delete"]},
        {"apiGroups": [""], "resources": ["nodes"],
         "verbs": ["get", "list", "watch", "update", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    ]  # fmt: skip
    subject = {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": NAMESPACE, "labels": labels}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": ACCOUNT, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": ACCOUNT}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": ACCOUNT}, "subjects": [subject],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": ACCOUNT}},
    ]  # fmt: skip


def plugin_env(image: str, consumable_shares: str) -> list[Json]:
    """The ``gpus`` container's environment as NVIDIA's chart sets it."""

    def field(path: str) -> Json:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    return [
        {"name": "LOG_VERBOSITY", "value": "4"},
        {"name": "MASK_NVIDIA_DRIVER_PARAMS", "value": "false"},
        {"name": "NVIDIA_DRIVER_ROOT", "value": str(DRIVER_ROOT)},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
        {"name": "CDI_ROOT", "value": CDI_DIR},
        {"name": "NVIDIA_MIG_CONFIG_DEVICES", "value": "all"},
        {"name": "NODE_NAME", **field("spec.nodeName")},
        {"name": "NAMESPACE", **field("metadata.namespace")},
        {"name": "SERVICE_ACCOUNT_NAME", **field("spec.serviceAccountName")},
        {"name": "IMAGE_NAME", "value": image},
        {"name": "NVIDIA_CDI_HOOK_PATH", "value": CDI_HOOK},
        {"name": "CONSUMABLE_SHARES", "value": consumable_shares},
        {"name": "FEATURE_GATES", "value": FEATURE_GATES},
        {"name": "KUBELET_REGISTRAR_DIRECTORY_PATH", "value": REGISTRY_DIR},
        {"name": "KUBELET_PLUGINS_DIRECTORY_PATH", "value": PLUGINS_DIR},
    ]


def daemonset(image: str, consumable_shares: str = CONSUMABLE_SHARES) -> Json:
    """The kubelet-plugin DaemonSet's ``gpus`` container, on the mock-root worker."""
    labels = {"app.kubernetes.io/name": NAME}
    mounts = [
        {"name": "plugins-registry", "mountPath": REGISTRY_DIR},
        {"name": "plugins", "mountPath": PLUGINS_DIR, "mountPropagation": "Bidirectional"},
        {"name": "cdi", "mountPath": CDI_DIR},
        {"name": "driver-root", "mountPath": "/driver-root",
         "mountPropagation": "HostToContainer"},
    ]  # fmt: skip
    volumes = [
        {"name": "plugins-registry", "hostPath": {"path": REGISTRY_DIR}},
        {"name": "plugins", "hostPath": {"path": PLUGINS_DIR}},
        {"name": "cdi", "hostPath": {"path": CDI_DIR}},
        {"name": "driver-root", "hostPath": {"path": str(DRIVER_ROOT), "type": "Directory"}},
    ]
    container = {
        "name": "gpus",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["gpu-kubelet-plugin", "-v", "4"],
        "securityContext": {"privileged": True},
        "env": plugin_env(image, consumable_shares),
        "volumeMounts": mounts,
    }
    spec = {
        "serviceAccountName": ACCOUNT,
        "nodeSelector": {MOCK_NODE_LABEL: "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
        "volumes": volumes,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def manifests(image: str, consumable_shares: str = CONSUMABLE_SHARES) -> list[Json]:
    return [*rbac(), device_class(), daemonset(image, consumable_shares)]
