"""The prevalidating child is started by the first review big enough to need it, not ahead of it
(issue 35: 18 MiB of RSS per replica, and most clusters never send a review of 128 KiB)."""

from __future__ import annotations

import threading

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.webhook.app import api_workers
from vgpu_bridge.webhook.inventory import InventoryCache
from vgpu_bridge.webhook.prevalidate import Prevalidator
from vgpu_bridge.webhook.templates import Sweeper


def test_no_thread_starts_the_prevalidating_child_ahead_of_a_big_review(
    recorded: RecordingApi,
) -> None:
    admitter = admitter_over(recorded)
    admitter.prevalidator = Prevalidator()
    inventory = InventoryCache(recorded.api, driver=DEFAULT.driver,
                               memory_capacity=DEFAULT.memory_capacity)  # fmt: skip
    sweeper = Sweeper(recorded.api, grace_s=600)
    threads = api_workers(admitter, inventory, sweeper, stop=threading.Event(), every_s=3600)
    assert "prevalidate" not in [thread.name for thread in threads]
