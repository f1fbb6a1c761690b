"""Where the chart's webhook and node agents run, as only a cluster admin's objects say it.

The view asks the webhook's Service for the cards' bookings and the agents' pods for live usage.
Labels cannot say which are ours: anyone who may create a Service or a pod in some namespace may
give it the chart's labels and serve made-up bookings or usage (issue 35). Our
MutatingWebhookConfiguration is cluster-scoped and only a cluster admin makes one; the chart has
its webhook call the Service of the release namespace, where the agents' DaemonSet runs too. So
the webhook is the Service that configuration calls, and the agents are the pods with the agents'
labels in that Service's namespace, and in no other. An operator may name either instead:
`--webhook-service NAMESPACE/NAME` (its namespace is then the agents' too) and
`--agent-namespace` (the agents' alone: a chart installed without its webhook has no
configuration to read).
"""

from __future__ import annotations

from functools import cached_property

from vgpu_bridge.kube import KubeApi, KubeError, dns_label_problem

OUR_SELECTOR = "app.kubernetes.io/name=vgpu-bridge"
WEBHOOK_CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
MAX_SERVICES = 4  # Services named by our configurations that are tried, at most (one per release)
AGENTS = "the agents' metrics (live usage)"
FORBIDDEN = "forbidden for this user, not shown"
NO_SERVICE = "no MutatingWebhookConfiguration of ours calls a Service"


class Release:
    """What the flags name, else what our configurations call; those are listed at most once
    per view, and only when a flag does not already say."""

    def __init__(
        self, api: KubeApi, *, webhook_service: str | None, agent_namespace: str | None
    ) -> None:
        self._api = api
        self.webhook_service = webhook_service
        self.agent_namespace = agent_namespace

    def webhook_services(self) -> list[str] | None:
        """The Services ("namespace/name") to ask for /bookings; None when our configurations
        cannot be read (the caller lists the claims instead)."""
        if self.webhook_service:
            return [self.webhook_service]
        configured = self._configured
        return None if isinstance(configured, KubeError) else configured

    def agent_namespaces(self, notes: list[str]) -> list[str]:
        """The namespaces whose pods with the agents' labels are asked for usage; none, with a
        note saying why and how to name one, when no flag or configuration says."""
        if self.agent_namespace:
            return [self.agent_namespace]
        if self.webhook_service:
            return [self.webhook_service.partition("/")[0]]
        configured = self._configured
        if isinstance(configured, KubeError) and configured.status in (401, 403):
            notes.append(f"{AGENTS}: {FORBIDDEN}")
            return []
        if isinstance(configured, KubeError) or not configured:
            why = str(configured).splitlines()[0][:160] if configured else NO_SERVICE
            notes.append(
                f"{AGENTS}: not read, their namespace unknown ({why}): name it with"
                " --agent-namespace"
            )
            return []
        return sorted({service.partition("/")[0] for service in configured})

    @cached_property
    def _configured(self) -> list[str] | KubeError:
        try:
            return configured_services(self._api)
        except KubeError as error:
            return error


def configured_services(api: KubeApi) -> list[str]:
    """The Services ("namespace/name") our MutatingWebhookConfigurations call, sorted, at most
    MAX_SERVICES; a webhook called by URL names none. KubeError when they cannot be listed."""
    listed = api.list(WEBHOOK_CONFIGURATIONS, labelSelector=OUR_SELECTOR)
    names = {
        service
        for item in listed.get("items") or ()
        for hook in (item.get("webhooks") if isinstance(item, dict) else None) or ()
        if (service := _service_of(hook)) is not None
    }
    return sorted(names)[:MAX_SERVICES]


def _service_of(hook: object) -> str | None:
    config = hook.get("clientConfig") if isinstance(hook, dict) else None
    service = config.get("service") if isinstance(config, dict) else None
    if not isinstance(service, dict):
        return None
    namespace, name = service.get("namespace"), service.get("name")
    if dns_label_problem(namespace) or dns_label_problem(name):
        return None
    return f"{namespace}/{name}"


def service_problem(service: str) -> str | None:
    """Why `--webhook-service` is not NAMESPACE/NAME (two DNS labels), or None."""
    namespace, slash, name = service.partition("/")
    if not slash:
        return f"must be NAMESPACE/NAME, got {service[:80]!r}"
    if problem := dns_label_problem(namespace):
        return f"the namespace {problem}"
    if problem := dns_label_problem(name):
        return f"the name {problem}"
    return None
