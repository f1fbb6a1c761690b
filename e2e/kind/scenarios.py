"""The product as users install it, on a kind cluster (``make e2e-kind``; run only against kind's
kubeconfig, so this file is not named test_*): ``helm install`` of the chart with mock GPUs, real
kubelets and containerd in kind nodes, the examples' manifests, libvgpu over the fake CUDA
driver. The tests run in file order; the last one uninstalls the chart."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.cluster.settings import REPO_ROOT, Settings
from e2e.kind import cudaimage, dockerd
from e2e.kind.cluster import GPU_NODE_LABEL, NAMESPACE, RELEASE, Kind, install
from e2e.realnode.product import parse
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi, KubeError

pytestmark = pytest.mark.e2e
Json = dict[str, Any]
EXAMPLES = REPO_ROOT / "examples"
RESOURCE = "/apis/resource.k8s.io/v1"
VGPU_DIR = "/usr/local/vgpu"  # the chart's agent.vgpuDir default
CDI_DIR = "/var/run/cdi"
CUDA_ERROR_OUT_OF_MEMORY = 2
CHUNK_MIB = 50


@pytest.fixture(scope="session")
def kind() -> Kind:
    return Kind.from_settings(Settings.from_env())


@pytest.fixture(scope="session")
def api(kind: Kind) -> KubeApi:
    return KubeApi.connect(str(kind.kubeconfig), timeout_s=30)


@pytest.fixture(scope="session")
def core(kind: Kind) -> client.CoreV1Api:
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kind.kubeconfig), client_configuration=configuration
    )
    return client.CoreV1Api(client.ApiClient(configuration))


@pytest.fixture(scope="session")
def workers(api: KubeApi) -> list[str]:
    """The GPU workers (mock GPUs); the second is tainted nvidia.com/gpu (kind-config.yaml)."""
    nodes = api.list("/api/v1/nodes", labelSelector=GPU_NODE_LABEL)["items"]
    return sorted(n["metadata"]["name"] for n in nodes)


@pytest.fixture
def namespace(api: KubeApi) -> Iterator[str]:
    name = f"kind-{secrets.token_hex(3)}"
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    api.create("/api/v1/namespaces", body)
    yield name
    delete_pods(api, name)
    api.delete(f"/api/v1/namespaces/{name}")


def delete_pods(api: KubeApi, namespace: str) -> None:
    """Delete the namespace's workloads and wait until their pods are gone (claims unprepared)."""
    for path in ("/apis/apps/v1/namespaces/{}/deployments", "/api/v1/namespaces/{}/pods"):
        for item in api.list(path.format(namespace))["items"]:
            api.delete(f"{path.format(namespace)}/{item['metadata']['name']}")
    wait_pods_gone(api, namespace)


def wait_pods_gone(api: KubeApi, namespace: str) -> None:
    """Wait until the namespace has no pods left (their claims unprepared)."""
    wait_for(
        lambda: not api.list(f"/api/v1/namespaces/{namespace}/pods")["items"],
        timeout_s=180,
        what=f"the pods of {namespace} gone",
        interval_s=1,
    )


def example(path: str) -> Json:
    doc: Json = yaml.safe_load((EXAMPLES / path).read_text())
    return doc


def share_pod(name: str, *, gpumem: int = 1000, gpus: int = 1, node: str | None = None) -> Json:
    pod = example("plain/pod-share.yaml")
    pod["metadata"]["name"] = name
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    limits.update({"nvidia.com/gpu": gpus, "nvidia.com/gpumem": gpumem})
    if node is not None:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def create(api: KubeApi, namespace: str, pod: Json) -> Json:
    created: Json = api.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    return created


def pod(api: KubeApi, namespace: str, name: str) -> Json:
    found: Json = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return found


def wait_running(api: KubeApi, namespace: str, name: str, timeout_s: float = 180) -> Json:
    def running() -> Json | None:
        found = pod(api, namespace, name)
        return found if found.get("status", {}).get("phase") == "Running" else None

    return wait_for(running, timeout_s=timeout_s, what=f"pod {name} Running", interval_s=1)


def log_with(
    core: client.CoreV1Api, namespace: str, name: str, text: str, container: str = ""
) -> str:
    """The container's log once it contains ``text`` (the container prints, then sleeps)."""

    def read() -> str | None:
        try:
            log: str = core.read_namespaced_pod_log(name, namespace, container=container or None)
        except ApiException as error:  # not started yet: 400 "waiting to start"
            if error.status != 400:
                raise
            return None
        return log if text in log else None

    return wait_for(read, timeout_s=60, what=f"{text!r} in {name}'s log", interval_s=1)


def allocated_devices(api: KubeApi, namespace: str) -> dict[str, list[tuple[str, str]]]:
    """Pod name -> the (pool, device) of each device its claims were allocated."""
    found: dict[str, list[tuple[str, str]]] = {}
    for claim in api.list(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")["items"]:
        owner = claim["status"]["reservedFor"][0]["name"]
        results = claim["status"]["allocation"]["devices"]["results"]
        found.setdefault(owner, []).extend((r["pool"], r["device"]) for r in results)
    return found


def node_exec(node: str, *command: str) -> str:
    done = subprocess.run(
        ["docker", "exec", node, *command],
        env=dockerd.docker_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def agent_pods(api: KubeApi) -> list[Json]:
    selector = "app.kubernetes.io/component=agent"
    items: list[Json] = api.list(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=selector)[
        "items"
    ]
    return items


# --- the cluster ------------------------------------------------------------------------------


def test_pods_resolve_service_names_through_the_clusters_coredns(
    api: KubeApi, core: client.CoreV1Api, namespace: str
) -> None:
    manifest = example("plain/pod-share.yaml")
    container = manifest["spec"]["containers"][0]
    del container["resources"]
    container["command"] = ["sh", "-c", "getent hosts kubernetes.default.svc.cluster.local"]
    manifest["metadata"]["name"] = "dns"
    create(api, namespace, manifest)
    service = api.get("/api/v1/namespaces/default/services/kubernetes")
    log = log_with(core, namespace, "dns", "kubernetes.default.svc.cluster.local")
    assert log.split()[0] == service["spec"]["clusterIP"], log


# --- the chart's own pods --------------------------------------------------------------------


def test_webhook_runs_two_ready_replicas_behind_its_service(api: KubeApi) -> None:
    deployments = api.list(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments")["items"]
    (webhook,) = deployments
    assert webhook["status"].get("readyReplicas") == 2, webhook["status"]
    hooks = api.list("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations")
    ours = [h for c in hooks["items"] for h in c.get("webhooks") or [] if "vgpu" in h["name"]]
    assert ours
    assert {h["failurePolicy"] for h in ours} == {"Fail"}
    (service,) = {h["clientConfig"]["service"]["name"] for h in ours}
    slices = api.list(
        f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
        labelSelector=f"kubernetes.io/service-name={service}",
    )["items"]
    ready = [e for s in slices for e in s.get("endpoints") or [] if e["conditions"].get("ready")]
    assert len(ready) == 2


def test_pods_are_admitted_while_a_webhook_replica_is_replaced(
    api: KubeApi, namespace: str
) -> None:
    selector = "app.kubernetes.io/component=webhook"
    replicas = api.list(f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=selector)["items"]
    api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{replicas[0]['metadata']['name']}")
    for index in range(3):  # failurePolicy Fail: each create needs a webhook answer
        created = create(api, namespace, share_pod(f"admitted-{index}"))
        assert created["spec"].get("resourceClaims"), created["spec"]


def test_agent_runs_on_every_gpu_worker_installs_libvgpu_and_registers_with_the_kubelet(
    api: KubeApi, workers: list[str]
) -> None:
    pods = agent_pods(api)
    assert sorted(p["spec"]["nodeName"] for p in pods) == workers
    for agent in pods:
        assert agent["status"]["phase"] == "Running"
        (init,) = agent["status"]["initContainerStatuses"]
        assert init["state"]["terminated"]["exitCode"] == 0, init
    for node in workers:
        assert "libvgpu.so" in node_exec(node, "ls", VGPU_DIR)
        registry = node_exec(node, "ls", "/var/lib/kubelet/plugins_registry")
        assert DEFAULT.driver in registry, registry


def test_each_mock_gpu_worker_publishes_its_gpus_through_the_agent(
    api: KubeApi, workers: list[str]
) -> None:
    def published() -> dict[str, int] | None:
        slices = api.list(
            f"{RESOURCE}/resourceslices", fieldSelector=f"spec.driver={DEFAULT.driver}"
        )
        found = {
            s["spec"]["nodeName"]: len(s["spec"].get("devices") or []) for s in slices["items"]
        }
        return found if sorted(found) == workers else None

    assert wait_for(published, timeout_s=60, what="slices of both workers") == dict.fromkeys(
        workers, 2
    )


# --- the examples ------------------------------------------------------------------------------


def test_share_pod_runs_with_the_limits_in_its_environment(
    api: KubeApi, core: client.CoreV1Api, namespace: str
) -> None:
    manifest = example("plain/pod-share.yaml")
    created = create(api, namespace, manifest)
    limits = created["spec"]["containers"][0].get("resources", {}).get("limits", {})
    assert not any(key.startswith("nvidia.com/") for key in limits)  # the webhook translated it
    name = manifest["metadata"]["name"]
    wait_running(api, namespace, name)
    log = log_with(core, namespace, name, "CUDA_DEVICE_SM_LIMIT_0")
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=3000m" in log
    assert "CUDA_DEVICE_SM_LIMIT_0=30" in log


def test_pods_share_one_mock_gpu(api: KubeApi, namespace: str, workers: list[str]) -> None:
    names = [f"packed-{i}" for i in range(3)]  # three shares, one worker, two GPUs
    for name in names:
        create(api, namespace, share_pod(name, node=workers[0]))
    for name in names:
        wait_running(api, namespace, name)
    devices = [d for name, ds in allocated_devices(api, namespace).items() for d in ds]
    assert len(devices) == 3
    assert len(set(devices)) < 3, devices  # at least two pods on one card


def test_deployment_replicas_see_a_quarter_of_an_80gi_card(
    api: KubeApi, core: client.CoreV1Api, namespace: str
) -> None:
    api.create(
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        example("plain/deployment-percentage.yaml"),
    )

    def running() -> list[Json] | None:
        pods = api.list(f"/api/v1/namespaces/{namespace}/pods")["items"]
        ready = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        return ready if len(ready) == 2 else None

    for replica in wait_for(running, timeout_s=180, what="2 replicas Running", interval_s=1):
        log = log_with(core, namespace, replica["metadata"]["name"], "CUDA_DEVICE_SM_LIMIT_0")
        assert "CUDA_DEVICE_MEMORY_LIMIT_0=20480m" in log
        assert "CUDA_DEVICE_SM_LIMIT_0=25" in log


def test_init_container_gets_its_share(
    api: KubeApi, core: client.CoreV1Api, namespace: str
) -> None:
    manifest = share_pod("with-init", gpumem=2000)
    init = dict(manifest["spec"]["containers"][0], name="prepare")
    init["command"] = ["bash", "-c", 'env | grep -E "^CUDA_" | sort']
    manifest["spec"]["initContainers"] = [init]
    create(api, namespace, manifest)
    wait_running(api, namespace, "with-init")
    log = log_with(core, namespace, "with-init", "CUDA_DEVICE_MEMORY_LIMIT_0", container="prepare")
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=2000m" in log


def test_two_gpus_are_two_distinct_cards(api: KubeApi, namespace: str) -> None:
    create(api, namespace, share_pod("two-cards", gpus=2))
    wait_running(api, namespace, "two-cards")
    (devices,) = allocated_devices(api, namespace).values()
    assert len(devices) == 2
    assert len(set(devices)) == 2, devices
    assert devices[0][0] == devices[1][0]  # both on the pod's node


def test_pod_that_does_not_fit_stays_pending_with_the_schedulers_reason(
    api: KubeApi, namespace: str
) -> None:
    create(api, namespace, share_pod("too-big", gpus=3))  # every worker has two

    def unschedulable() -> Json | None:
        conditions = pod(api, namespace, "too-big")["status"].get("conditions") or []
        scheduled = [c for c in conditions if c["type"] == "PodScheduled"]
        return scheduled[0] if scheduled and scheduled[0].get("reason") == "Unschedulable" else None

    condition = wait_for(unschedulable, timeout_s=120, what="too-big Unschedulable", interval_s=1)
    assert condition["status"] == "False"
    assert condition.get("message"), condition
    assert pod(api, namespace, "too-big")["status"]["phase"] == "Pending"


def test_mig_mode_is_refused_at_admission(api: KubeApi, namespace: str) -> None:
    manifest = example("plain/pod-share.yaml")
    manifest["metadata"]["annotations"] = {"nvidia.com/vgpu-mode": "mig"}
    with pytest.raises(KubeError) as refused:
        create(api, namespace, manifest)
    assert "mig" in str(refused.value).lower()


# --- libvgpu in kind pods ----------------------------------------------------------------------


def cuda_pod(name: str, node: str, gpumem_mib: int) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "cuda",
                    "image": cudaimage.CUDA_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": [str(CHUNK_MIB), "600"],
                    "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": gpumem_mib}},
                }
            ],
        },
    }


def test_libvgpu_refuses_allocations_past_each_pods_share(
    api: KubeApi, core: client.CoreV1Api, namespace: str, workers: list[str]
) -> None:
    shares = {"small": 1000, "large": 2000}
    for name, mib in shares.items():
        create(api, namespace, cuda_pod(name, workers[0], mib))
    for name, mib in shares.items():
        wait_running(api, namespace, name)
        values = parse(log_with(core, namespace, name, "alloc_error="))
        assert values["env.CUDA_DEVICE_MEMORY_LIMIT_0"] == [f"{mib}m"], values
        assert values["init_error"] == ["0"], values
        assert values["total_mib"] == [str(mib)], values  # cuMemGetInfo shows the share
        assert values["alloc_error"] == [str(CUDA_ERROR_OUT_OF_MEMORY)], values
        assert mib - CHUNK_MIB < int(values["allocated_mib"][0]) <= mib, values


# --- the agent and the chart under change ------------------------------------------------------


def test_pods_keep_running_while_an_agent_restarts_and_new_ones_start_once_it_is_back(
    api: KubeApi, namespace: str, workers: list[str]
) -> None:
    node = workers[1]
    create(api, namespace, share_pod("before", node=node))
    before = wait_running(api, namespace, "before")
    (agent,) = [p for p in agent_pods(api) if p["spec"]["nodeName"] == node]
    api.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{agent['metadata']['name']}")
    create(api, namespace, share_pod("during", node=node))
    wait_running(api, namespace, "during", timeout_s=240)
    after = pod(api, namespace, "before")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["status"]["phase"] == "Running"
    restarts = [c["restartCount"] for c in after["status"]["containerStatuses"]]
    assert restarts == [0]


def test_helm_upgrade_keeps_running_pods(kind: Kind, api: KubeApi, namespace: str) -> None:
    create(api, namespace, share_pod("steady"))
    before = wait_running(api, namespace, "steady")
    install(kind, "--set", "webhook.timeoutSeconds=15")
    after = pod(api, namespace, "steady")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["status"]["phase"] == "Running"
    assert [c["restartCount"] for c in after["status"]["containerStatuses"]] == [0]
    hooks = api.list("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations")
    timeouts = {
        h["timeoutSeconds"]
        for c in hooks["items"]
        for h in c.get("webhooks") or []
        if "vgpu" in h["name"]
    }
    assert timeouts == {15}


def test_uninstall_leaves_nothing_of_our_driver_behind(
    kind: Kind, api: KubeApi, workers: list[str]
) -> None:
    """The last test: workloads deleted (the agents unprepare their claims), then the chart."""
    for item in api.list("/api/v1/namespaces")["items"]:
        if item["metadata"]["name"].startswith("kind-"):
            delete_pods(api, item["metadata"]["name"])
    subprocess.run(
        [str(kind.helm), "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait",
         "--kubeconfig", str(kind.kubeconfig)],
        check=True,
    )  # fmt: skip

    def leftovers() -> list[str]:
        found = [
            f"{kind_}/{o['metadata']['name']}"
            for kind_ in ("resourceclaimtemplates", "resourceclaims")
            for o in api.list(f"{RESOURCE}/{kind_}")["items"]
        ]
        slices = api.list(
            f"{RESOURCE}/resourceslices", fieldSelector=f"spec.driver={DEFAULT.driver}"
        )
        return found + [f"resourceslices/{s['metadata']['name']}" for s in slices["items"]]

    wait_for(
        lambda: not leftovers(), timeout_s=180, what="no claims, templates or slices", interval_s=2
    )
    for node in workers:
        specs = [f for f in node_exec(node, "ls", CDI_DIR).split() if DEFAULT.driver in f]
        assert specs == [], (node, specs)
        claims = node_exec(node, "sh", "-c", f"ls {VGPU_DIR}/claims 2>/dev/null || true").split()
        assert claims == [], (node, claims)
