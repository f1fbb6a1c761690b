"""One DRAPlugin servicer serves every version we announce: it has each generated rpc, and the
versions the kubelet is told are exactly the ones registered, v1 first."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

from vgpu_bridge.node.grpc import DRA_VERSIONS, SUPPORTED_VERSIONS, DraServicer


@pytest.mark.parametrize(
    ("version", "services"),
    [(version, services) for version, _, services in DRA_VERSIONS],
    ids=[version for version, _, _ in DRA_VERSIONS],
)
def test_the_servicer_has_every_rpc_of_the_generated_service(
    version: str, services: ModuleType
) -> None:
    generated = {
        name
        for name, _ in inspect.getmembers(services.DRAPluginServicer, inspect.isfunction)
        if not name.startswith("_")
    }
    assert generated == {"NodePrepareResources", "NodeUnprepareResources"}  # new rpc: add it
    assert all(callable(getattr(DraServicer, name, None)) for name in generated), version


def test_v1_is_announced_first_and_every_message_module_is_its_versions() -> None:
    assert SUPPORTED_VERSIONS == ("v1.DRAPlugin", "v1beta1.DRAPlugin")
    for version, messages, services in DRA_VERSIONS:
        package = version.split(".")[0]
        assert messages.__name__.endswith(f"dra_{package}_pb2")
        assert services.__name__.endswith(f"dra_{package}_pb2_grpc")
