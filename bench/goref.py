"""The Go reference webhook of `bench/webhook.py` (`bench/goref/`, standard library only), built
into the cache like the e2e tier's Go programs and reused while its sources are unchanged."""

from __future__ import annotations

import time
from pathlib import Path

from e2e.cluster.settings import Settings
from e2e.gobuild import build_lock, go_build, reuse_or_build, sources_digest

SOURCES = Path(__file__).resolve().parent / "goref"
FILES = ("go.mod", "main.go")


class GoRefBuildError(RuntimeError):
    """`go build` of the reference webhook failed."""


def go_reference_webhook(settings: Settings | None = None) -> Path:
    """The reference webhook's binary, built when missing or out of date."""
    settings = settings or Settings.from_env()
    directory = settings.cache_root / "bench"
    binary, started = directory / "goref-webhook", time.monotonic()
    with build_lock(directory):
        result = reuse_or_build(
            binary,
            directory / "goref-webhook.stamp",
            digest=sources_digest(SOURCES, FILES),
            build=lambda: go_build(
                "building the Go reference webhook",
                module=SOURCES,
                binary=binary,
                ldflags="-s -w",
                go_env=settings.go_env,
                error=GoRefBuildError,
            ),
            started=started,
        )
    return result.binary
