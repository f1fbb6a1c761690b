"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.recording_api import RecordingApi, recording_api


@pytest.fixture
def recorded() -> Iterator[RecordingApi]:
    """A real KubeApi over a loopback server that records every request."""
    with recording_api() as api:
        yield api
