"""A running agent withdraws its devices while NVIDIA's device plugin is registered on its Node
(one publication with none) and publishes them again once the plugin is gone; it keeps serving
throughout, so the kubelet can still unprepare the claims it prepared. A Node it cannot read
changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import cast

from vgpu_bridge.node.app import Agent, device_plugin_watch
from vgpu_bridge.node.skipped_gpus import NoShareableGpu

CARDS = ("gpu-0", "gpu-1")


class Publisher:
    def __init__(self) -> None:
        self.gpus: tuple[object, ...] = CARDS
        self.published: list[tuple[object, ...]] = []

    def set_gpus(self, gpus: tuple[object, ...]) -> None:
        self.gpus = tuple(gpus)

    def sync(self) -> None:
        self.published.append(self.gpus)


class Node:
    """What the look finds: the plugin's capacity, None, or an unreadable Node."""

    def __init__(self) -> None:
        self.plugin: str | None = None
        self.unreadable = False

    def look(self) -> str | None:
        if self.unreadable:
            raise NoShareableGpu("cannot read Node")
        return self.plugin


def watch(node: Node, publisher: Publisher) -> Callable[[], None]:
    agent = SimpleNamespace(device_plugin_on_node=node.look, publisher=publisher, gpus=CARDS)
    return device_plugin_watch(cast(Agent, agent))


def test_no_plugin_publishes_nothing_new() -> None:
    node, publisher = Node(), Publisher()
    check = watch(node, publisher)
    check()
    check()
    assert publisher.published == []


def test_the_plugin_withdraws_every_device_until_it_is_gone() -> None:
    node, publisher = Node(), Publisher()
    check = watch(node, publisher)
    node.plugin = "8"
    check()
    check()  # still there: nothing more to publish
    assert publisher.published == [()]
    node.unreadable = True  # an API outage neither withdraws nor restores
    check()
    assert publisher.published == [()]
    node.unreadable, node.plugin = False, None
    check()
    assert publisher.published == [(), CARDS]
