"""The webhook's HAMi resource names and privileged-container setting reach the translator, and a
name outside HAMi's prefixes (example.com/vgpu) is seen by the fast path (issue 16, item 8)."""

from __future__ import annotations

import pytest

from vgpu_bridge.core import TranslatorConfig
from vgpu_bridge.flag_settings import SettingsError
from vgpu_bridge.webhook.fastpath import may_ask_for_gpus
from vgpu_bridge.webhook.settings import Settings

TLS = {"VGPU_BRIDGE_TLS_CERT_FILE": "/tls/crt", "VGPU_BRIDGE_TLS_KEY_FILE": "/tls/key"}


def test_defaults_are_hamis_names_and_privileged_pods_are_refused() -> None:
    assert Settings.from_env(TLS).translator_config() == TranslatorConfig()


def test_renamed_resources_and_allow_privileged_reach_the_translator() -> None:
    env = {
        **TLS,
        "VGPU_BRIDGE_RESOURCE_COUNT_NAME": "hami.io/gpu",
        "VGPU_BRIDGE_RESOURCE_MEMORY_NAME": "hami.io/gpumem",
        "VGPU_BRIDGE_ALLOW_PRIVILEGED": "true",
    }
    config = Settings.from_args(
        ["--resource-core-name", "hami.io/gpucores"], env
    ).translator_config()
    assert config.resource_count_name == "hami.io/gpu"
    assert config.resource_memory_name == "hami.io/gpumem"
    assert config.resource_core_name == "hami.io/gpucores"
    assert config.resource_memory_percentage_name == "nvidia.com/gpumem-percentage"
    assert config.allow_privileged is True


def test_a_renamed_resource_is_seen_by_the_fast_path() -> None:
    pod = {"metadata": {}, "spec": {"containers": [{"resources": {"limits": {"hami.io/gpu": 1}}}]}}
    assert may_ask_for_gpus("Pod", pod)


def test_a_resource_renamed_outside_the_known_prefixes_is_seen_by_the_fast_path() -> None:
    env = {**TLS, "VGPU_BRIDGE_RESOURCE_COUNT_NAME": "example.com/vgpu"}
    names = Settings.from_env(env).translator_config().resource_names()
    limits = {"example.com/vgpu": 1, "cpu": "1"}
    pod = {"metadata": {}, "spec": {"initContainers": [{"resources": {"limits": limits}}]}}
    assert may_ask_for_gpus("Pod", pod, resource_names=names)
    assert not may_ask_for_gpus("Pod", pod)  # under the default names it asks for nothing of ours


@pytest.mark.parametrize("name", ["gpu", "hami.io/", "example.com/bad name"])
def test_a_name_that_is_no_resource_name_is_refused(name: str) -> None:
    with pytest.raises(SettingsError, match="resource_count_name"):
        Settings.from_env({**TLS, "VGPU_BRIDGE_RESOURCE_COUNT_NAME": name})
