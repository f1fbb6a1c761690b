"""Volcano on kind: vc-scheduler and vc-controller-manager as Deployments, on images built here.

The images (``Dockerfile.volcano``, one target per component) hold the Volcano tier's multi-call
binary (``e2e.volcano.build``: the volcano.sh/volcano module at the release
``e2e/volcano/gotools`` pins) on the local Debian Python base (``rootfs.py``). Installed with
``kubectl apply``: Volcano's CRDs, and the namespace, service accounts, cluster roles and bindings
of its scheduler and controllers, all read from that same module (its CRD directory and its
all-in-one ``installer/volcano-development.yaml``; nothing of Volcano is committed here); then
the Volcano tier's scheduler configuration (the ``capacity`` queue plugin, DRAConsumableCapacity
on) and the two Deployments, written here.

Volcano's own admission webhook (vc-webhook-manager) is left out, as on the local Volcano tier:
it only defaults and validates Volcano's objects (``examples/volcano`` spells out what its
``jobs/mutate`` would default), the chart's webhook translates vcjobs before it would run, and
our multi-call binary does not build it.
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.settings import Settings
from e2e.kind.dockerd import docker_env
from e2e.kind.rootfs import ensure_rootfs_image
from e2e.kind.steps import StepError, run
from e2e.volcano.build import VolcanoBuild, ensure_binary
from e2e.volcano.components import CONTROLLERS, SCHEDULER_CONF
from e2e.waiting import wait_for

Json = dict[str, Any]
NAMESPACE = "volcano-system"
DOCKERFILE = Path(__file__).resolve().parent / "Dockerfile.volcano"
#: ``vgpu-volcano <component>``, and the Dockerfile's target of the same name
COMPONENTS = ("scheduler", "controller-manager")
ALL_IN_ONE = Path("installer/volcano-development.yaml")
#: each component's service account (also its cluster role's name) in the all-in-one manifest
ACCOUNTS = {"scheduler": "volcano-scheduler", "controller-manager": "volcano-controllers"}
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
HEALTHZ_PORT = 11251
CONFIG_MAP = "vc-scheduler-config"
CONFIG_DIR = "/volcano.scheduler"
CONFIG_FILE = "scheduler.conf"


def image(component: str, version: str) -> str:
    return f"vgpu-bridge-kind/vc-{component}:{version}"


def build_images(settings: Settings, build: VolcanoBuild, *, offline: bool) -> list[str]:
    """``docker build`` of both components' images: offline on the local Debian base, or
    (``offline=False``) on the Dockerfile's public default. Only COPY: no step needs a network."""
    binary = ensure_binary(build).binary
    context = settings.cache_root / "kind-volcano-context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    shutil.copy2(binary, context / binary.name)
    base = [f"--build-arg=BASE_IMAGE={ensure_rootfs_image(settings, 'python')}"] if offline else []
    images = [image(component, build.version) for component in COMPONENTS]
    try:
        for component, tag in zip(COMPONENTS, images, strict=True):
            command = ["docker", "build", *base, "--network=none", "--target", component]
            run([*command, "-t", tag, "-f", str(DOCKERFILE), str(context)], env=docker_env())
    finally:
        shutil.rmtree(context, ignore_errors=True)
    return images


def upstream_rbac(all_in_one: str) -> list[Json]:
    """Volcano's namespace, then each component's service account, cluster role and binding, as
    Volcano's all-in-one manifest has them; StepError when one is missing."""
    documents = [d for d in yaml.safe_load_all(all_in_one) if isinstance(d, dict)]
    namespaces = [
        d for d in documents if d["kind"] == "Namespace" and d["metadata"]["name"] == NAMESPACE
    ]
    wanted = set(ACCOUNTS.values())
    rbac = [d for d in documents if d["kind"] in RBAC_KINDS and _account_of(d) in wanted]
    found = {(d["kind"], _account_of(d)) for d in rbac}
    missing = [f"{k} {a}" for k in RBAC_KINDS for a in sorted(wanted) if (k, a) not in found]
    if not namespaces or missing:
        missing = missing if namespaces else [f"Namespace {NAMESPACE}", *missing]
        raise StepError(f"Volcano's {ALL_IN_ONE} lacks {', '.join(missing)}")
    return [*namespaces, *rbac]


def _account_of(document: Json) -> str:
    """The component account a document is about: its own name, or a binding's role."""
    if document["kind"] == "ClusterRoleBinding":
        return str(document["roleRef"]["name"])
    return str(document["metadata"]["name"])


def component_args(component: str) -> list[str]:
    """In-cluster flags: the service account's config, one replica without leader election."""
    common = [
        "--leader-elect=false",
        "--enable-healthz=true",
        f"--healthz-address=:{HEALTHZ_PORT}",
        "--logtostderr=true",
        "-v=3",
    ]
    if component == "scheduler":
        return [
            f"--scheduler-conf={CONFIG_DIR}/{CONFIG_FILE}",
            # v1.15.x links the 1.35 libraries, where this gate is alpha and off
            "--feature-gates=DRAConsumableCapacity=true",
            "--schedule-period=1s",
            *common,
        ]
    return [f"--controllers={CONTROLLERS}", *common]


def scheduler_config() -> Json:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
        "data": {CONFIG_FILE: SCHEDULER_CONF},
    }


def container(component: str, version: str) -> Json:
    mounts: list[Json] = [{"name": "tmp", "mountPath": "/tmp"}]
    if component == "scheduler":
        mounts.append({"name": "config", "mountPath": CONFIG_DIR, "readOnly": True})
    return {
        "name": component,
        "image": image(component, version),
        "imagePullPolicy": "Never",
        "args": component_args(component),
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": HEALTHZ_PORT},
            "periodSeconds": 2,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": mounts,
    }


def deployment(component: str, version: str) -> Json:
    name = f"vc-{component}"
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "volcano"}
    volumes: list[Json] = [{"name": "tmp", "emptyDir": {}}]
    if component == "scheduler":
        volumes.append({"name": "config", "configMap": {"name": CONFIG_MAP}})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": ACCOUNTS[component],
                    "containers": [container(component, version)],
                    "volumes": volumes,
                },
            },
        },
    }


def manifests(build: VolcanoBuild) -> list[Json]:
    """Everything but the CRDs, in the order ``kubectl apply`` should create it."""
    upstream = upstream_rbac((build.module_dir() / ALL_IN_ONE).read_text())
    ours = [deployment(component, build.version) for component in COMPONENTS]
    return [*upstream, scheduler_config(), *ours]


def install(kubectl: list[str], build: VolcanoBuild, workdir: Path) -> None:
    """Volcano's CRDs (Established), then RBAC, configuration and both Deployments (rolled out).
    ``kubectl`` is the command with its ``--kubeconfig``; the manifest is kept in ``workdir``."""
    crds = [f"--filename={path}" for path in build.crd_files()]
    run([*kubectl, "apply", "--server-side", "--force-conflicts", *crds])
    run([*kubectl, "wait", "--for=condition=Established", "--timeout=120s", *crds])
    manifest = workdir / "volcano.generated.yaml"
    manifest.write_text(yaml.safe_dump_all(manifests(build), sort_keys=False))
    run([*kubectl, "apply", "--server-side", "--force-conflicts", f"--filename={manifest}"])
    for component in COMPONENTS:
        rollout = ["rollout", "status", f"deployment/vc-{component}", "--timeout=180s"]
        run([*kubectl, "--namespace", NAMESPACE, *rollout])
    queue_open = partial(default_queue_open, kubectl)
    wait_for(queue_open, timeout_s=120, what="Volcano's default queue Open", interval_s=1)


def default_queue_open(kubectl: list[str]) -> bool:
    """vc-scheduler creates the queue at start; vc-controller-manager opens it."""
    get = ["get", "queues.scheduling.volcano.sh", "default", "--output=jsonpath={.status.state}"]
    try:
        return run([*kubectl, *get], quiet=True).strip() == "Open"
    except StepError:
        return False
