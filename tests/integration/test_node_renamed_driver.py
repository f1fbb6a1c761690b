"""One driver name for webhook and node: a renamed pair still understands each other.

The webhook is built by its own `build` from its settings; the node agent reads the claim with the
profile its own settings give it. The allocation in between is what the scheduler would record for
the claim the webhook made: our devices, the capacities the claim asked for, its config.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.webhook_harness import unreachable_api
from tests.unit.node.claims import BY_NAME, NODE, UID, allocated_claim, result
from vgpu_bridge.core import TranslationContext
from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.node.allocation import ClaimError, claim_shares
from vgpu_bridge.node.app import profile_for
from vgpu_bridge.node.settings import Settings as NodeSettings
from vgpu_bridge.webhook.app import build
from vgpu_bridge.webhook.settings import Settings as WebhookSettings

RENAMED = "gpu.example.com"
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "team-a"},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "cuda",
                "resources": {
                    "limits": {
                        "nvidia.com/gpu": "1",
                        "nvidia.com/gpumem": "3000",
                        "nvidia.com/gpucores": "30",
                        "nvidia.com/priority": "0",
                    }
                },
            }
        ]
    },
}


def _webhook_claim_spec(driver_name: str) -> dict[str, Any]:
    settings = WebhookSettings(tls_cert_file="c", tls_key_file="k", driver_name=driver_name)
    admitter, _inventory, _sweeper = build(settings, unreachable_api())
    context = TranslationContext(
        config=admitter.config, profile=admitter.profile, inventory=admitter.inventory()
    )
    plan = admitter.registry.pick(POD, settings.scheduler).translate(POD, context=context)
    (template,) = plan.templates
    spec: dict[str, Any] = template["spec"]["spec"]
    return spec


def _allocated(spec: dict[str, Any], driver: str) -> dict[str, Any]:
    """What the scheduler records for `spec` on gpu-0 of this node."""
    (request,) = spec["devices"]["requests"]
    asked = request["exactly"]["capacity"]["requests"]
    share = {**result(memory=asked["memory"], cores=asked["cores"]), "driver": driver}
    config = [{**c, "source": "FromClaim"} for c in spec["devices"]["config"]]
    return allocated_claim(share, config=config)


def test_a_renamed_webhook_asks_for_the_renamed_class_and_driver() -> None:
    spec = _webhook_claim_spec(RENAMED)
    (request,) = spec["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == RENAMED
    assert [c["opaque"]["driver"] for c in spec["devices"]["config"]] == [RENAMED]


def test_a_renamed_node_accepts_what_the_renamed_webhook_makes() -> None:
    profile = profile_for(NodeSettings(node_name=NODE, driver_name=RENAMED))
    claim = _allocated(_webhook_claim_spec(RENAMED), RENAMED)
    shares = claim_shares(claim, uid=UID, node=NODE, profile=profile, gpus=BY_NAME)
    assert [(s.device, s.memory_mib, s.cores) for s in shares.shares] == [("gpu-0", 3000, 30)]
    assert shares.priority == 0


def test_a_node_under_another_name_refuses_the_claim() -> None:
    profile = profile_for(NodeSettings(node_name=NODE))
    claim = _allocated(_webhook_claim_spec(RENAMED), RENAMED)
    with pytest.raises(ClaimError, match=r"has no device of driver gpu\.vgpu-bridge\.io"):
        claim_shares(claim, uid=UID, node=NODE, profile=profile, gpus=BY_NAME)


def test_the_webhook_takes_the_driver_name_from_its_flag_or_env_like_the_node() -> None:
    required = ["--tls-cert-file", "c", "--tls-key-file", "k"]
    environ = {"VGPU_BRIDGE_DRIVER_NAME": RENAMED}
    assert WebhookSettings.from_args(required, environ).driver_name == RENAMED
    assert (
        WebhookSettings.from_args([*required, "--driver-name", "x.example"], environ).driver_name
        == "x.example"
    )
    assert WebhookSettings.from_args(required, {}).driver_name == "gpu.vgpu-bridge.io"
    assert NodeSettings.from_env({"VGPU_BRIDGE_NODE_NAME": "n", **environ}).driver_name == RENAMED


def test_the_webhook_refuses_a_driver_name_that_is_no_dns_subdomain() -> None:
    with pytest.raises(SettingsError, match="driver_name"):
        WebhookSettings.from_args(["--tls-cert-file", "c", "--tls-key-file", "k",
                                   "--driver-name", "Gpu/Example"], {})  # fmt: skip
