"""Node agent settings, and its installer's (flags and `VGPU_BRIDGE_*` env vars, see
`flag_settings`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from vgpu_bridge.core.profiles import (
    DEFAULT,
    DRIVER_NAME_MAX_LENGTH,
    DRIVER_NAME_PATTERN,
    ENFORCER_DRIVER,
    NVIDIA_DRIVER,
)
from vgpu_bridge.flag_settings import (
    FlagSettings,
    SettingsError,
    host_port,
    setting,
    split_host_port,
)
from vgpu_bridge.kube import dns_label_problem, dns_subdomain_problem
from vgpu_bridge.logs import LogLevel
from vgpu_bridge.node.claimdirs import MAX_REMOVALS_PER_PASS

KUBELET_PLUGINS = Path("/var/lib/kubelet/plugins")
DRIVER_ROOT_MAX_LENGTH = 1024
ENFORCEABLE_DRIVERS = (NVIDIA_DRIVER,)  # whose shares the agent can hold to their limits
# what only our own cards use: NVIDIA's plugin publishes and prepares the cards in enforcer mode
OWN_CARD_FLAGS = ("mock_gpus", "mock_gpus_node_label", "mock_driver", "driver_root",
                  "driver_root_mount")  # fmt: skip
LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def driver_name_problem(value: str) -> str | None:
    """Why `value` cannot be a driver name; empty stands for the mode's default. A driver this
    agent enforces is not ours to be: its name would take that driver's plugin dir, checkpoint
    and registration socket on the node."""
    if value and not re.fullmatch(DRIVER_NAME_PATTERN, value):
        return f"must be a DNS subdomain (pattern {DRIVER_NAME_PATTERN}), got {value[:60]!r}"
    if value in ENFORCEABLE_DRIVERS:
        return (
            f"{value} is NVIDIA's DRA driver (its kubelet plugin dir, checkpoint and sockets); "
            f"this agent runs as {DEFAULT.driver}, or as {ENFORCER_DRIVER} with --enforce-driver"
        )
    return None


def optional(problem: Callable[[object], str | None]) -> Callable[[str], str | None]:
    """`problem`, with the empty string (unset) allowed."""
    return lambda value: problem(value) if value else None


def enforce_driver_problem(value: str) -> str | None:
    if value and value not in ENFORCEABLE_DRIVERS:
        return f"only {', '.join(ENFORCEABLE_DRIVERS)} can be enforced, got {value[:60]!r}"
    return None


def label_key_problem(value: str) -> str | None:
    """Why `value` cannot be a Node label's key: `[prefix/]name`, the prefix a DNS subdomain,
    the name at most 63 of [A-Za-z0-9-_.] starting and ending alphanumeric (empty: unset)."""
    if not value:
        return None
    prefix, _, name = value.rpartition("/")
    if "/" in value and (not prefix or dns_subdomain_problem(prefix) is not None):
        return f"the prefix of a label key must be a DNS subdomain, got {value[:80]!r}"
    if LABEL_NAME.fullmatch(name) is None:
        return (
            "must be a label key ([prefix/]name, the name at most 63 letters, digits, '-', '_' "
            f"or '.', alphanumeric at both ends), got {value[:80]!r}"
        )
    return None


def driver_root_problem(value: str) -> str | None:
    """Why `value` cannot be a driver root: it is written into every claim's CDI spec as the
    host path of the driver's files, so only a plain absolute path will do (empty: none)."""
    if not value:
        return None
    if len(value) > DRIVER_ROOT_MAX_LENGTH:
        return f"must be at most {DRIVER_ROOT_MAX_LENGTH} characters, got {len(value)}"
    if not value.startswith("/"):
        return f"must be an absolute path, got {value!r}"
    if ".." in value.split("/") or not value.isprintable():
        return f"must be a plain path (no '..', no control characters), got {value!r}"
    return None


@dataclass(frozen=True, kw_only=True)
class Settings(FlagSettings):
    prog: ClassVar[str] = "vgpu-bridge node"

    node_name: str = setting(min_length=1, description="this node's name (the pool's name)")
    driver_name: str = setting(
        "",
        check=driver_name_problem,
        max_length=DRIVER_NAME_MAX_LENGTH,
        description=f"DRA driver name (a DNS subdomain); the webhook's --driver-name; empty: "
        f"{DEFAULT.driver}, or {ENFORCER_DRIVER} with --enforce-driver",
    )
    enforce_driver: str = setting(
        "",
        check=enforce_driver_problem,
        description=f"enforcer mode: the cards are {NVIDIA_DRIVER}'s (NVIDIA's DRA driver with "
        "--consumable-shares publishes and prepares them); this agent publishes only one "
        "enforcer device per node and holds each share of theirs to its limits; empty: off",
    )
    plugin_dir: Path | None = setting(
        None, description="DRA socket and checkpoint dir; /var/lib/kubelet/plugins/<driver>"
    )
    registry_dir: Path = setting(
        Path("/var/lib/kubelet/plugins_registry"), description="kubelet plugin registry"
    )
    cdi_dir: Path = setting(Path("/var/run/cdi"), description="where CDI specs are written")
    mock_gpus: str | None = setting(
        None,
        description="YAML file (or inline list) of {uuid, productName, memory}; NVML if unset",
    )
    mock_gpus_node_label: str = setting(
        "",
        check=label_key_problem,
        description="a label on this agent's Node naming its mock cards, <count>x<card>: "
        "8xh100-80gb (a profile: h100-80gb, h200-141gb, a100-40gb, a100-80gb, l4-24gb, "
        "t4-16gb) or 2x24Gi (a memory size); read at start (mock_cards.py); empty: unset",
    )
    mock_driver: str = setting(
        "",
        check=driver_root_problem,
        description="with mock GPUs: the stand-in CUDA driver (a driver install of the fake "
        "libcuda and NVML; the agent image's /opt/vgpu-bridge/mock-driver), copied to "
        "<vgpu-dir>/mock-driver and given to every claim's containers as their driver; empty: "
        "none",
    )
    kubeconfig: str | None = setting(None, description="kubeconfig; in-cluster if unset")
    vgpu_dir: Path = setting(
        Path("/usr/local/vgpu"),
        description="host dir with libvgpu.so, ld.so.preload and claims/ (shared regions)",
    )
    metrics_listen: str = host_port(
        "0.0.0.0:9401", description="HOST:PORT of /metrics and /healthz; empty to disable"
    )
    hami_metrics: bool = setting(
        False,
        description="also serve HAMi's series (hami_vgpu_memory_used_bytes, ...) with its names, "
        "labels and units, for HAMi's dashboards; their containers from --pod-resources-socket",
    )
    pod_resources_socket: Path = setting(
        Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        description="the kubelet's pod-resources socket: which containers use each claim, for "
        "HAMi's series (without it, pods are read from the API where the agent may)",
    )
    resync_seconds: float = setting(30, gt=0, description="how often slices are checked")
    health_grace_seconds: float = setting(
        120,
        gt=0,
        description="/healthz fails when no slice publication succeeds for resync-seconds + this",
    )
    removals_per_pass: int = setting(
        MAX_REMOVALS_PER_PASS,
        gt=0,
        description="how many entries (unlinks, rmdirs, renames) one pass of the sweep, or one "
        "Unprepare, deletes of a tree a container left; the rest goes in the next passes",
    )
    cleanup_seconds: float = setting(
        600, gt=0, description="how often prepared claims that are gone are cleaned"
    )
    device_health: bool = setting(
        True,
        description="taint unhealthy cards in the slices (NVML XID events and lost GPUs; "
        "files under <plugin-dir>/mock-health with mock GPUs)",
    )
    gpu_wait_seconds: float = setting(
        60, gt=0, description="on a node where NVML lists no GPU, how often to look again"
    )
    device_health_seconds: float = setting(
        5, gt=0, description="how often the cards' health is checked"
    )
    driver_root: str = setting(
        "",
        check=driver_root_problem,
        description="the NVIDIA driver install as the node's runtime sees it ('/' on a host "
        "install, /run/nvidia/driver under GPU Operator): its libraries and binaries go into "
        "every claim's CDI spec; empty: none (mock GPUs, tests)",
    )
    driver_root_mount: str = setting(
        "",
        check=driver_root_problem,
        description="where this process sees --driver-root (the chart mounts it at "
        "/driver-root); empty: at --driver-root itself",
    )
    log_level: LogLevel = setting("info", description="the least level logged")
    device_taint_effect: Literal["NoSchedule", "NoExecute", "None"] = setting(
        "NoSchedule",
        description="an unhealthy card's taint: NoSchedule keeps new shares off it, NoExecute "
        "also evicts the pods using it, None only marks it",
    )

    daemonset: str = setting(
        "",
        check=optional(dns_subdomain_problem),
        description="this agent's DaemonSet (in --daemonset-namespace): when it is gone or being "
        "deleted at SIGTERM, the agent is being uninstalled and removes everything of ours from "
        "the node (uninstall.py); otherwise SIGTERM is a restart and changes nothing on disk; "
        "empty: always a restart",
    )
    daemonset_namespace: str = setting(
        "", check=optional(dns_label_problem), description="the namespace of --daemonset"
    )
    uninstall_drain_seconds: float = setting(
        45,
        gt=0,
        le=600,
        description="on uninstall, how long the kubelet may still unprepare claims (pods "
        "terminating on the node) before the agent removes what is left; keep it below the "
        "pod's terminationGracePeriodSeconds",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if bool(self.daemonset) != bool(self.daemonset_namespace):
            raise SettingsError(
                [("daemonset", "--daemonset and --daemonset-namespace go together")]
            )
        if self.driver_root_mount and not self.driver_root:
            raise SettingsError([("driver_root_mount", "needs --driver-root")])
        if self.enforce_driver:
            _refuse_own_card_flags(self)
        _check_mock_flags(self)
        if not self.driver_name:
            default = ENFORCER_DRIVER if self.enforce_driver else DEFAULT.driver
            object.__setattr__(self, "driver_name", default)

    @property
    def enforcer_mode(self) -> bool:
        """Whether the agent enforces another driver's shares instead of publishing cards."""
        return bool(self.enforce_driver)

    @property
    def mock_mode(self) -> bool:
        """Whether the cards are mock cards (a list, or a label on the Node), not NVML's."""
        return bool(self.mock_gpus or self.mock_gpus_node_label)

    @property
    def mock_driver_path(self) -> Path | None:
        return Path(self.mock_driver) if self.mock_driver else None

    @property
    def driver_root_path(self) -> Path | None:
        """The driver root on the host (the spec's host paths start there); None: none."""
        return Path(self.driver_root) if self.driver_root else None

    @property
    def driver_root_mount_path(self) -> Path | None:
        """Where this process reads the driver root; None without one."""
        if not self.driver_root:
            return None
        return Path(self.driver_root_mount or self.driver_root)

    @property
    def plugin_path(self) -> Path:
        return self.plugin_dir or KUBELET_PLUGINS / self.driver_name

    @property
    def dra_socket(self) -> Path:
        return self.plugin_path / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver_name}-reg.sock"

    @property
    def checkpoint_file(self) -> Path:
        return self.plugin_path / "checkpoint.json"

    @property
    def mock_health_dir(self) -> Path:
        """Mock GPUs' health files, one per card (`device_health.mock_source`)."""
        return self.plugin_path / "mock-health"

    @property
    def max_publication_silence_s(self) -> float:
        """How long /healthz tolerates no successful ResourceSlice publication."""
        return self.resync_seconds + self.health_grace_seconds

    @property
    def metrics_host_port(self) -> tuple[str, int] | None:
        return split_host_port(self.metrics_listen) if self.metrics_listen else None


def _refuse_own_card_flags(settings: Settings) -> None:
    """In enforcer mode no card is ours: a flag that names our cards or driver files says the
    deployment is mixed up (two bookkeepers of one card), so the agent does not start."""
    given = [name for name in OWN_CARD_FLAGS if getattr(settings, name)]
    if given:
        raise SettingsError([
            (name, f"{flag_name(name)} cannot be used with --enforce-driver: "
                   f"{settings.enforce_driver}'s plugin owns the cards and their driver files")
            for name in given
        ])  # fmt: skip


def _check_mock_flags(settings: Settings) -> None:
    """One source of mock cards; the stand-in driver only for mock cards, and not beside a real
    driver root (a claim's spec mounts one driver)."""
    if settings.mock_gpus and settings.mock_gpus_node_label:
        raise SettingsError([("mock_gpus_node_label", "--mock-gpus and --mock-gpus-node-label "
                              "both name the mock cards: set one")])  # fmt: skip
    if settings.mock_driver and not settings.mock_mode and not settings.enforce_driver:
        raise SettingsError([("mock_driver", "the stand-in driver is for mock cards only: set "
                              "--mock-gpus or --mock-gpus-node-label")])  # fmt: skip
    if settings.mock_driver and settings.driver_root:
        raise SettingsError([("mock_driver", "--mock-driver and --driver-root both name the "
                              "containers' driver: set one")])  # fmt: skip


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


@dataclass(frozen=True, kw_only=True)
class InstallSettings(FlagSettings):
    """`vgpu-bridge node install-libvgpu` (see `library.py`)."""

    prog: ClassVar[str] = "vgpu-bridge node install-libvgpu"

    vgpu_dir: Path = setting(
        Path("/usr/local/vgpu"), description="host dir to install into (the agent's)"
    )
    libvgpu_source: Path = setting(
        Path("/opt/vgpu-bridge/lib/libvgpu.so"),
        description="the libvgpu.so to install (where the agent image has it)",
    )
