"""The view asks for live usage only the agents of the release namespace (issue 35): the namespace
of the webhook's Service as our MutatingWebhookConfiguration names it (a cluster admin's object),
else `--webhook-service`'s, else `--agent-namespace`'s. Anyone who may create a pod somewhere may
give it the agent's labels and serve made-up usage: a view of every namespace's pods by label
would merge it. No namespace known: no agent is asked, and a note says how to name one."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.unit.status.recorded import NAMESPACE, NODE, MiB, agent_metrics
from tests.unit.status.served_api import ServedApi
from tests.unit.status.test_command import (  # noqa: F401 - the fixture
    AGENT,
    AGENTS,
    CONFIGURATIONS,
    OUR_LABELS,
    PROXY,
    api,
    document,
    our_configuration,
)
from tests.unit.status.test_usage import used_sample
from vgpu_bridge.status import command

TENANT_AGENT = "/api/v1/namespaces/aaa-tenant/pods/vgpu-bridge-agent-x1:9400/proxy/metrics"
USED = [512 * MiB, 3 * MiB + 7]  # what the real agent reports, card by card


def with_a_tenants_lookalike(served: ServedApi) -> None:
    """A tenant's pod with the agent's labels and metrics port on the same node, claiming a huge
    use of infer-a's claim; listed after the real agent (its answer would win a merge) wherever
    pods are listed by label in every namespace."""
    lookalike: dict[str, Any] = copy.deepcopy(AGENT)
    lookalike["metadata"]["namespace"] = "aaa-tenant"
    served.list_of("/api/v1/pods", [AGENT, lookalike], labelSelector=command.AGENT_SELECTOR)
    served.list_of("/api/v1/namespaces/aaa-tenant/pods", [lookalike],
                   labelSelector=command.AGENT_SELECTOR)  # fmt: skip
    made_up = "# TYPE vgpu_bridge_claim_memory_used_bytes gauge\n" + used_sample(
        "infer-a", "GPU-agent-0000", 70_000 * MiB
    )
    served.serve(TENANT_AGENT, agent_metrics() + made_up)


def used(found: dict[str, Any]) -> list[Any]:
    return [card["usedMemory"] for card in found["cards"]]


def paths(served: ServedApi) -> list[str]:
    return [path for path, _ in served.asked]


def agent_lists(served: ServedApi) -> list[str]:
    """The paths listed with the agents' selector (in pages: `limit` aside), in order."""
    return [path for path, query in served.asked
            if query.get("labelSelector") == command.AGENT_SELECTOR]  # fmt: skip


@pytest.mark.parametrize("scope", [["-A"], ["-n", NAMESPACE]])
def test_a_lookalike_agent_in_a_tenants_namespace_is_never_asked(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
    scope: list[str],
) -> None:
    with_a_tenants_lookalike(api)
    found = document(api, tmp_path, *scope)
    assert used(found)[0] == USED[0]  # the real agent's, not the tenant's 70,000 MiB
    assert TENANT_AGENT not in paths(api)
    assert agent_lists(api) == [AGENTS]
    assert (PROXY, {}) in api.asked
    assert found["notes"] == []


def test_the_configurations_are_listed_once_for_the_bookings_and_the_agents(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
) -> None:
    document(api, tmp_path, "-n", NAMESPACE)
    assert paths(api).count(CONFIGURATIONS) == 1


def test_a_user_who_may_not_read_the_configurations_is_told_and_no_agent_is_asked(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
) -> None:
    with_a_tenants_lookalike(api)
    api.forbid(CONFIGURATIONS, labelSelector=OUR_LABELS)
    found = document(api, tmp_path, "-A")
    assert used(found) == [None, None]
    assert found["notes"] == [
        "the agents' metrics (live usage): forbidden for this user, not shown"
    ]
    assert agent_lists(api) == []
    assert TENANT_AGENT not in paths(api)


BY_URL_HOOK = {"name": "a.vgpu-bridge.io", "clientConfig": {"url": "https://example.com/mutate"}}
BY_URL = {"metadata": {"name": "x"}, "webhooks": [BY_URL_HOOK]}
NO_SERVICE = "no MutatingWebhookConfiguration of ours calls a Service"


@pytest.mark.parametrize(
    ("configurations", "why"),
    [
        pytest.param([], NO_SERVICE, id="none"),
        pytest.param([BY_URL], NO_SERVICE, id="by-url"),
        pytest.param(None, "HTTP 500", id="failed"),
    ],
)
def test_without_a_configured_service_no_agent_is_asked_and_the_note_names_the_flag(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
    configurations: list[Any] | None,
    why: str,
) -> None:
    with_a_tenants_lookalike(api)
    if configurations is None:
        api.serve(CONFIGURATIONS, {"kind": "Status", "code": 500}, status=500,
                  labelSelector=OUR_LABELS)  # fmt: skip
    else:
        api.list_of(CONFIGURATIONS, configurations, labelSelector=OUR_LABELS)
    found = document(api, tmp_path, "-A")
    assert used(found) == [None, None]
    (note,) = found["notes"]
    assert note.startswith("the agents' metrics (live usage): not read, their namespace unknown (")
    assert why in note
    assert note.endswith("): name it with --agent-namespace")
    assert agent_lists(api) == []
    assert TENANT_AGENT not in paths(api)


def test_agent_namespace_names_where_the_agents_are_without_reading_the_configurations(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
) -> None:
    with_a_tenants_lookalike(api)
    api.forbid(CONFIGURATIONS, labelSelector=OUR_LABELS)
    found = document(api, tmp_path, "-A", "--agent-namespace", "vgpu-bridge")
    assert used(found) == USED
    assert found["notes"] == []
    assert CONFIGURATIONS not in paths(api)
    assert TENANT_AGENT not in paths(api)
    api.asked.clear()  # a tenant's namespace named: its pods are asked, as the operator said
    found = document(api, tmp_path, "-A", "--agent-namespace", "aaa-tenant")
    assert TENANT_AGENT in paths(api)
    assert PROXY not in paths(api)


def test_the_named_webhook_services_namespace_is_the_agents(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
) -> None:
    with_a_tenants_lookalike(api)
    api.forbid(CONFIGURATIONS, labelSelector=OUR_LABELS)
    found = document(api, tmp_path, "-A", "--webhook-service", "vgpu-bridge/vgpu-bridge-webhook")
    assert used(found) == USED
    assert CONFIGURATIONS not in paths(api)
    assert TENANT_AGENT not in paths(api)


def test_every_configured_releases_namespace_is_asked(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Two releases (one per driver, say): each one's agents are asked, the tenant's still not."""
    api.list_of(CONFIGURATIONS, [our_configuration("vgpu-bridge"), our_configuration("gpu-two")],
                labelSelector=OUR_LABELS)  # fmt: skip
    api.list_of("/api/v1/namespaces/gpu-two/pods", [], labelSelector=command.AGENT_SELECTOR)
    with_a_tenants_lookalike(api)
    found = document(api, tmp_path, "-A")
    assert used(found) == USED
    assert agent_lists(api) == ["/api/v1/namespaces/gpu-two/pods", AGENTS]
    assert NODE in {card["node"] for card in found["cards"]}
