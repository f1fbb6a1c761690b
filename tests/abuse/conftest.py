"""One fake API server and one real webhook process for the whole abuse tier."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.abuse.fake_api import FakeApi, fake_api
from tests.abuse.webhook_client import Webhook, running_webhook


@pytest.fixture(scope="session")
def api() -> Iterator[FakeApi]:
    with fake_api() as running:
        yield running


@pytest.fixture(scope="session")
def webhook(tmp_path_factory: pytest.TempPathFactory, api: FakeApi) -> Iterator[Webhook]:
    with running_webhook(tmp_path_factory.mktemp("webhook"), api) as running:
        yield running
