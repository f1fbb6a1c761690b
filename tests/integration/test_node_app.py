"""`app.build` wires the agent and starts nothing; `Agent.start` and `close` own the sockets."""

from __future__ import annotations

import threading

from tests.integration.node_harness import agent_dirs, agent_settings, unreachable_api
from tests.unit.node.claims import GPUS, NODE
from vgpu_bridge.node.app import build, workers


def test_building_the_agent_writes_nothing_and_starting_it_opens_both_sockets() -> None:
    with agent_dirs() as dirs:
        settings = agent_settings(dirs, node=NODE)
        agent = build(settings, unreachable_api(), gpus=GPUS)
        assert list(dirs.root.iterdir()) == []
        assert agent.profile.driver == settings.driver_name
        assert agent.start() is None  # no /metrics listener in these settings
        try:
            assert settings.dra_socket.is_socket()
            assert settings.registration_socket.is_socket()
        finally:
            agent.close(grace_s=1)
        assert not settings.registration_socket.exists()
        assert not settings.dra_socket.exists()


def test_the_agent_runs_five_periodic_workers_none_started_by_build() -> None:

    with agent_dirs() as dirs:
        agent = build(agent_settings(dirs, node=NODE), unreachable_api(), gpus=GPUS)
        threads = workers(agent, threading.Event())
        names = ["slices", "cleanup", "host-pids", "tenant-dirs", "device-health"]
        assert [t.name for t in threads] == names
        assert not any(t.is_alive() for t in threads)
