"""Webhook settings (flags and `VGPU_BRIDGE_*` env vars, see `flag_settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from vgpu_bridge.core.config import TranslatorConfig, hami_setting, resource_name_problem
from vgpu_bridge.core.profiles import (
    DEFAULT,
    DRIVER_NAME_MAX_LENGTH,
    DRIVER_NAME_PATTERN,
    ENFORCER_DRIVER,
    DriverProfile,
    nvidia_profile,
    profile_named,
)
from vgpu_bridge.flag_settings import (
    FlagSettings,
    SettingsError,
    comma_list,
    host_port,
    setting,
    split_host_port,
)
from vgpu_bridge.kube import dns_label_problem, dns_subdomain_problem
from vgpu_bridge.logs import LogLevel
from vgpu_bridge.webhook.connections import Limits
from vgpu_bridge.webhook.extra_workloads import (
    DEFAULT_EXTRA_WORKLOAD_RESOURCES,
    ExtraResource,
    extra_resources_problem,
    parse_extra_resources,
)


def _hami_name(field: str) -> Any:  # Any: what a dataclass field declaration takes
    """The setting for one of HAMi's resource names, with TranslatorConfig's default."""
    hami_name, default = hami_setting(field)
    return setting(
        default,
        description=f"HAMi's {hami_name} as this cluster names it (any resource name; the fast "
        "path and the chart's matchConditions look for it)",
        check=resource_name_problem,
    )


def consumable_shares_problem(mode: str) -> str | None:
    """Why `mode` is not a `--consumable-shares` value NVIDIA's driver shares cards under."""
    if mode in ("", "disabled"):
        return (
            f"{mode or 'empty'}: NVIDIA's driver must run with ConsumableShares (gate "
            "ConsumableShares=true, --consumable-shares memory, unlimited or N); without it a "
            "card goes whole to one claim and no share exists to enforce"
        )
    return _nvidia_profile_problem(consumable_shares=mode)


def enforcer_driver_problem(driver: str) -> str | None:
    """Why `driver` cannot name our enforcer (core's rule: KAI counts a device or DeviceClass
    whose name contains "gpu" as a GPU, so the enforcer would be one more GPU per node)."""
    return _nvidia_profile_problem(enforcer_driver=driver)


def _nvidia_profile_problem(**values: str) -> str | None:
    try:
        nvidia_profile(**values)
    except ValueError as error:
        return str(error)
    return None


@dataclass(frozen=True, kw_only=True)
class Settings(FlagSettings):
    """`vgpu-bridge webhook`'s settings."""

    prog: ClassVar[str] = "vgpu-bridge webhook"

    listen: str = host_port("0.0.0.0:8443", description="HOST:PORT to serve HTTPS on")
    metrics_listen: str = host_port(
        "",
        description="HOST:PORT of a plain-HTTP /metrics, /healthz, /readyz (never /mutate); "
        "empty: off",
    )
    tls_cert_file: str = setting(description="PEM certificate (reloaded when it changes)")
    tls_key_file: str = setting(description="PEM private key")
    tls_secret: str | None = setting(
        None,
        description="keep our own certificate in this kubernetes.io/tls Secret of --namespace "
        "(made when missing, renewed before it ends) and write it to --tls-cert-file and "
        "--tls-key-file; unset: only read those files",
        check=dns_subdomain_problem,
    )
    tls_webhook_configuration: str | None = setting(
        None,
        description="with --tls-secret: the MutatingWebhookConfiguration whose caBundle we keep "
        "(it owns the Secret)",
        check=dns_subdomain_problem,
    )
    webhook_configuration: str = setting(
        "",
        description="the MutatingWebhookConfiguration that calls us (the chart's): it owns every "
        "ResourceClaimTemplate we make (and the --tls-secret Secret), so deleting it (helm "
        "uninstall) deletes them; empty: --tls-webhook-configuration, else no owner",
        check=lambda name: dns_subdomain_problem(name) if name else None,
    )
    tls_service: str = setting(
        "vgpu-bridge-webhook",
        description="with --tls-secret: the Service the API server calls us by (the "
        "certificate's names)",
        check=dns_label_problem,
    )
    tls_check_seconds: float = setting(
        15,
        ge=1,
        le=3600,
        description="with --tls-secret: how often the certificate and the caBundle are checked",
    )
    client_ca_file: str | None = setting(
        None,
        description="PEM CA: /mutate and /metrics then answer only clients with a certificate "
        "it signed (configure the API server to present one); unset: any client",
    )
    kubeconfig: str | None = setting(None, description="kubeconfig; in-cluster if unset")
    log_level: LogLevel = setting(
        "info", description="least severe line written: debug, info, warning or error"
    )
    profile: Literal["default", "hami", "nvidia"] = setting(
        "default",
        description="driver profile: default (our agent), hami (HAMi's DRA driver) or nvidia "
        "(NVIDIA's DRA driver gpu.nvidia.com with our enforcer on its shares)",
    )
    nvidia_consumable_shares: str = setting(
        "100",
        description="with --profile nvidia: NVIDIA's --consumable-shares, exactly as its kubelet "
        "plugin runs: memory, unlimited or N shares per card (100: a share is an SM percent)",
        check=consumable_shares_problem,
    )
    enforcer_driver: str = setting(
        ENFORCER_DRIVER,
        pattern=DRIVER_NAME_PATTERN,
        max_length=DRIVER_NAME_MAX_LENGTH,
        description="with --profile nvidia: our enforcer's driver and DeviceClass name (the "
        "node agent's --driver-name in enforcer mode); no 'gpu' in it: KAI counts no enforcer "
        "as a GPU",
        check=enforcer_driver_problem,
    )
    driver_name: str = setting(
        DEFAULT.driver,
        pattern=DRIVER_NAME_PATTERN,
        max_length=DRIVER_NAME_MAX_LENGTH,
        description="our DRA driver's name (a DNS subdomain; the node agent's --driver-name), "
        "also the DeviceClass of the default profile's claims",
    )
    scheduler: str = setting("auto", description="adapter: auto or a name")
    namespace: str = setting("vgpu-bridge", description="our own namespace (never mutated)")
    excluded_namespaces: str = setting("kube-system", description="comma list, never mutated")
    opt_out_label: str = setting(
        "vgpu-bridge.io/ignore",
        description="label=true: not translated (claims of our class are still checked)",
    )
    sweep_grace_seconds: int = setting(600, ge=0, description="unreferenced template age")
    sweep_interval_seconds: int = setting(120, ge=1, description="how often to sweep")
    extra_workload_resources: str = setting(
        DEFAULT_EXTRA_WORKLOAD_RESOURCES,
        description="comma list of custom workload resources, <resource>.<group>/<version>, "
        "whose objects may name templates: the sweeper keeps what they name (not installed: "
        "skipped; not allowed to list: that namespace's templates all kept); empty: none",
        check=extra_resources_problem,
    )
    max_body_bytes: int = setting(3 * 2**20, ge=1024, description="largest request body")
    max_connections: int = setting(
        1000,
        ge=16,
        le=60000,
        description="open connections; past it the longest-waiting one is closed",
    )
    request_timeout_seconds: float = setting(
        10, gt=0, le=300, description="a request's head and body must arrive within it"
    )
    idle_timeout_seconds: float = setting(
        60, gt=0, le=3600, description="a keep-alive connection may idle this long"
    )
    drain_seconds: float = setting(
        10,
        ge=0,
        le=300,
        description="on SIGTERM: not ready at once, reviews still answered this long (each "
        "reply closes its connection), then the requests in flight finished; a second signal "
        "ends it; 0: stop at once",
    )
    workers: int = setting(8, ge=1, le=256, description="threads that run admissions")
    max_queued_reviews: int = setting(
        128,
        ge=1,
        le=100000,
        description="reviews waiting for a worker, shared round-robin between namespaces; past "
        "it the namespace holding the most is refused (HTTP 503: failurePolicy applies)",
    )
    max_queued_bytes: int = setting(
        32 * 2**20,
        ge=2**20,
        description="bytes of the reviews waiting for a worker; past it, as max-queued-reviews",
    )
    max_templates_per_namespace: int = setting(
        100, ge=1, description="ResourceClaimTemplates the webhook creates per namespace"
    )
    default_memory: int = setting(0, ge=0, description="MiB; 0 = whole card")
    default_cores: int = setting(0, ge=0, le=100, description="SM percent of a share")
    default_gpu_num: int = setting(1, ge=1, description="GPUs when no count is given")
    memory_factor: int = setting(1, ge=1, description="gpumem unit in MiB")
    resource_count_name: str = _hami_name("resource_count_name")
    resource_memory_name: str = _hami_name("resource_memory_name")
    resource_memory_percentage_name: str = _hami_name("resource_memory_percentage_name")
    resource_core_name: str = _hami_name("resource_core_name")
    resource_priority_name: str = _hami_name("resource_priority_name")
    extended_resource_name: str = setting(
        "",
        description="the extended resource our DeviceClass serves (the chart's "
        "deviceClass.extendedResourceName; Kubernetes >= 1.37): an untranslated pod's requests of "
        "it count as whole cards against the namespace GPU quota; empty: none",
        check=lambda value: resource_name_problem(value) if value else None,
    )
    allow_privileged: bool = setting(
        False,
        description="admit GPU pods with a privileged container (HAMi >= 2.10 refuses them: "
        "such a container sees every GPU and escapes its share)",
    )
    volcano_scheduler_names: str = setting("volcano", description="vc-scheduler names, comma list")
    volcano_version: str | None = setting(None, description="Volcano release, e.g. v1.15.1")
    kai_scheduler_names: str = setting("kai-scheduler", description="KAI scheduler names")
    kai_version: str | None = setting(None, description="KAI build, e.g. v0.18.0")
    kai_without_capacity: Literal["warn", "refuse"] = setting(
        "warn", description="what to do when the KAI build has no consumable capacity"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tls_secret is not None and self.tls_webhook_configuration is None:
            raise SettingsError([("tls_webhook_configuration", "required with --tls-secret")])
        if self.webhook_configuration and self.tls_webhook_configuration not in (
            None,
            self.webhook_configuration,
        ):
            raise SettingsError(
                [("tls_webhook_configuration", f"must be --webhook-configuration "
                  f"{self.webhook_configuration} (the one configuration owns and trusts us)")]
            )  # fmt: skip
        if self.enforcer_driver == self.driver_name:
            raise SettingsError(
                [("enforcer_driver", f"must differ from --driver-name {self.driver_name}")]
            )

    def translator_config(self) -> TranslatorConfig:
        return TranslatorConfig(
            default_memory=self.default_memory,
            default_cores=self.default_cores,
            default_gpu_num=self.default_gpu_num,
            memory_factor=self.memory_factor,
            resource_count_name=self.resource_count_name,
            resource_memory_name=self.resource_memory_name,
            resource_memory_percentage_name=self.resource_memory_percentage_name,
            resource_core_name=self.resource_core_name,
            resource_priority_name=self.resource_priority_name,
            allow_privileged=self.allow_privileged,
        )

    def owner_configuration(self) -> str:
        """The configuration that owns what we make ("": none). The one that
        `--tls-webhook-configuration` names owns the Secret already: with no other named, it owns
        the templates too."""
        return self.webhook_configuration or self.tls_webhook_configuration or ""

    def driver_profile(self) -> DriverProfile:
        """The profile the webhook's claims are made for (`nvidia` in NVIDIA's mode, with our
        enforcer)."""
        return profile_named(
            self.profile,
            our_driver=self.driver_name,
            nvidia_consumable_shares=self.nvidia_consumable_shares,
            enforcer_driver=self.enforcer_driver,
        )

    def limits(self) -> Limits:
        return Limits(
            max_connections=self.max_connections,
            request_timeout_s=self.request_timeout_seconds,
            idle_timeout_s=self.idle_timeout_seconds,
            max_body_bytes=self.max_body_bytes,
            workers=self.workers,
            max_queued=self.max_queued_reviews,
            max_queued_bytes=self.max_queued_bytes,
        )

    @property
    def host_port(self) -> tuple[str, int]:
        return split_host_port(self.listen)

    @property
    def metrics_host_port(self) -> tuple[str, int] | None:
        return split_host_port(self.metrics_listen) if self.metrics_listen else None

    def volcano_names(self) -> tuple[str, ...]:
        return comma_list(self.volcano_scheduler_names)

    def kai_names(self) -> tuple[str, ...]:
        return comma_list(self.kai_scheduler_names)

    def extended_resource_names(self) -> tuple[str, ...]:
        return (self.extended_resource_name,) if self.extended_resource_name else ()

    def extra_workloads(self) -> tuple[ExtraResource, ...]:
        return parse_extra_resources(self.extra_workload_resources)

    def excluded(self) -> frozenset[str]:
        return frozenset({*comma_list(self.excluded_namespaces), self.namespace})
