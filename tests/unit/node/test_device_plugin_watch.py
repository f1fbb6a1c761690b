"""A running agent that finds NVIDIA's device plugin registered on its Node withdraws its devices
(one more publication, with none) and stops: its restart waits until the plugin is gone."""

from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace
from typing import Any, cast

from vgpu_bridge.node.app import Agent, device_plugin_watch


class Publisher:
    def __init__(self) -> None:
        self.gpus: tuple[object, ...] | None = None
        self.synced_with: list[tuple[object, ...] | None] = []

    def set_gpus(self, gpus: tuple[object, ...]) -> None:
        self.gpus = tuple(gpus)

    def sync(self) -> None:
        self.synced_with.append(self.gpus)


def agent_with(look: Any, publisher: Publisher) -> Agent:
    return cast(Agent, SimpleNamespace(device_plugin_on_node=look, publisher=publisher))


def test_no_plugin_changes_nothing() -> None:
    publisher, stop = Publisher(), threading.Event()
    device_plugin_watch(agent_with(lambda: None, publisher), stop)()
    assert publisher.synced_with == []
    assert not stop.is_set()


def test_the_plugin_withdraws_every_device_and_stops_the_agent() -> None:
    publisher, stop = Publisher(), threading.Event()
    device_plugin_watch(agent_with(lambda: "8", publisher), stop)()
    assert publisher.synced_with == [()]  # published once more, with no device
    assert stop.is_set()


def test_the_agent_stops_even_when_the_withdrawal_fails() -> None:
    class Failing(Publisher):
        def sync(self) -> None:
            raise RuntimeError("API down")

    stop = threading.Event()
    with contextlib.suppress(RuntimeError):
        device_plugin_watch(agent_with(lambda: "8", Failing()), stop)()
    assert stop.is_set()
