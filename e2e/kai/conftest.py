"""Fixtures of the KAI tests: single-size cards of our driver, KAI's mutating webhook as a
recording stand-in, and our webhook in the settings a KAI cluster uses.

Package-scoped, so the DeviceClass and slices are gone before other packages publish their own.
Each of our webhooks answers only in namespaces labelled ``NAMESPACE_LABEL=<its name>``
(``kai_namespace`` picks one), so several settings run side by side.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster
from e2e.kai.kai_pods import emptied
from e2e.kai.real_kai import QUEUES, KaiBuild, install_crds, queue, running_kai
from e2e.kai.webhooks import (
    OUR_CONFIG_PREFIX,
    KaiAdmissionRecorder,
    kai_admission_recorder,
    label_namespace,
    our_webhook,
)
from e2e.webhook.our_driver import Card, publish, withdraw
from e2e.webhook.process import WebhookProcess

H100 = ("NVIDIA H100 80GB HBM3", "80Gi")
#: The real KAI tests' queues: a parent, and leaves with GPU limits unlimited, 1 and 0.5.
PARENT, UNLIMITED, ONE_GPU, HALF_GPU = "e2e-parent", "e2e-unlimited", "e2e-one-gpu", "e2e-half-gpu"
#: A driver (and DeviceClass) name without "gpu": KAI then counts none of its claims as GPUs.
PLAIN_DRIVER = "shares.accel-bridge.example"

#: Our webhook's settings by the name tests ask for: (configuration name, extra flags).
#: "first" is the registration docs/kai.md prescribes; "late" sorts after `mutating-kai-admission`.
WEBHOOKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "first": (f"{OUR_CONFIG_PREFIX}-kai-e2e", ()),
    "late": ("vgpu-bridge-kai-e2e-late", ()),
    "capacity": (f"{OUR_CONFIG_PREFIX}-kai-e2e-capacity", ("--kai-version", "v0.18.0")),
    "old-warn": (f"{OUR_CONFIG_PREFIX}-kai-e2e-old-warn", ("--kai-version", "v0.17.0")),
    "plain-name": (
        f"{OUR_CONFIG_PREFIX}-kai-e2e-plain-name",
        ("--driver-name", PLAIN_DRIVER),
    ),
    "old-refuse": (
        f"{OUR_CONFIG_PREFIX}-kai-e2e-old-refuse",
        ("--kai-version", "v0.17.0", "--kai-without-capacity", "refuse"),
    ),
}


@pytest.fixture(scope="package")
def kai_cards(kube: KubeClient, fake_nodes: list[str]) -> Iterator[dict[str, list[Card]]]:
    """One card size everywhere (what `gpu-fraction` needs): two on node 0, one on node 1."""
    cards = {
        fake_nodes[0]: [Card("gpu-0", "GPU-kai-0000", *H100), Card("gpu-1", "GPU-kai-0001", *H100)],
        fake_nodes[1]: [Card("gpu-0", "GPU-kai-1000", *H100)],
    }
    slices = publish(kube, cards)
    yield cards
    withdraw(kube, slices)


@pytest.fixture(scope="package")
def kai_admission(
    kube: KubeClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KaiAdmissionRecorder]:
    with kai_admission_recorder(kube, tmp_path_factory.mktemp("kai-admission")) as recorder:
        yield recorder


@pytest.fixture(scope="package")
def _our_webhooks(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    kai_cards: dict[str, list[Card]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[str], WebhookProcess]]:
    """Starts each setting of `WEBHOOKS` the first time a test asks for it."""
    started: dict[str, WebhookProcess] = {}
    with ExitStack() as stack:

        def start(name: str) -> WebhookProcess:
            if name not in started:
                config_name, args = WEBHOOKS[name]
                workdir: Path = tmp_path_factory.mktemp(f"webhook-{name}")
                started[name] = stack.enter_context(
                    our_webhook(
                        kube,
                        e2e_cluster.kubeconfig,
                        workdir,
                        config_name=config_name,
                        namespace_value=name,
                        args=args,
                    )
                )
            return started[name]

        yield start
        for name, process in started.items():
            print(f"--- webhook {name}\n{process.log()[-3000:]}")  # shown for failed tests


@pytest.fixture
def kai_namespace(
    kube: KubeClient,
    namespace: str,
    kai_admission: KaiAdmissionRecorder,
    _our_webhooks: Callable[[str], WebhookProcess],
) -> Callable[[str], str]:
    """`kai_namespace("first")`: the test's namespace, served by that webhook setting and by
    the KAI stand-in."""

    def under(name: str) -> str:
        _our_webhooks(name)
        label_namespace(kube, namespace, name, kai_admission)
        return namespace

    return under


@pytest.fixture(scope="package")
def kai_build() -> KaiBuild:
    build = KaiBuild.from_env()
    if build is None:
        why = (
            "no KAI build: run `python -m e2e.kai build --source DIR` "
            "(or set KAI_BIN_DIR and KAI_CRD_DIR)"
        )
        if os.environ.get("KAI_REQUIRED") == "1":  # make e2e-kai: a missing build fails
            pytest.fail(why)
        pytest.skip(why)
    return build


@pytest.fixture(scope="package")
def real_kai(
    kai_build: KaiBuild,
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    kai_cards: dict[str, list[Card]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[KaiBuild]:
    install_crds(kube, kai_build.crd_dir)
    queues = [queue(PARENT), queue(UNLIMITED, parent=PARENT), queue(ONE_GPU, parent=PARENT,
              gpu_limit=1), queue(HALF_GPU, parent=PARENT, gpu_limit=0.5)]  # fmt: skip
    for body in queues:
        kube.create(QUEUES, body)
    workdir = tmp_path_factory.mktemp("kai")
    with running_kai(
        kai_build, e2e_cluster.kubeconfig, workdir, feature_gates="DRAConsumableCapacity=true"
    ):
        yield kai_build
        for log in sorted(workdir.glob("*.log")):
            print(f"--- {log.name}\n{log.read_text()[-4000:]}")
    for body in reversed(queues):
        kube.delete(f"{QUEUES}/{body['metadata']['name']}")


@pytest.fixture
def kai_ns(
    real_kai: KaiBuild,
    kube: KubeClient,
    kai_namespace: Callable[[str], str],
    kubelet_standin: KubeletStandIn,
) -> Iterator[str]:
    """A namespace under our webhook as docs/kai.md registers it; pods bound by KAI's binder
    to the fake nodes are marked Running by the kubelet stand-in. Afterwards its pods are gone
    and their claims released, so the next test finds every card untouched."""
    ns = kai_namespace("first")
    yield ns
    emptied(kube, ns)
