"""The Go programs of `bench/webhook.py` (standard library only), built into the cache like the
e2e tier's Go programs and reused while their sources are unchanged: the reference webhook
(`bench/goref/`) and the load generator (`bench/goload/`)."""

from __future__ import annotations

import time
from pathlib import Path

from e2e.cluster.settings import Settings
from e2e.gobuild import build_lock, go_build, reuse_or_build, sources_digest

SOURCES = Path(__file__).resolve().parent / "goref"
LOAD_SOURCES = Path(__file__).resolve().parent / "goload"
FILES = ("go.mod", "main.go")


class GoRefBuildError(RuntimeError):
    """`go build` of a bench Go program failed."""


def go_reference_webhook(settings: Settings | None = None) -> Path:
    """The reference webhook's binary, built when missing or out of date."""
    return _built(SOURCES, "goref-webhook", "the Go reference webhook", settings)


def go_load_generator(settings: Settings | None = None) -> Path:
    """The load generator's binary (HTTP/1.1 keep-alive, closed or open loop, reporting its own
    CPU time), built when missing or out of date."""
    return _built(LOAD_SOURCES, "goload", "the Go load generator", settings)


def _built(sources: Path, name: str, what: str, settings: Settings | None) -> Path:
    settings = settings or Settings.from_env()
    directory = settings.cache_root / "bench"
    binary, started = directory / name, time.monotonic()
    with build_lock(directory):
        result = reuse_or_build(
            binary,
            directory / f"{name}.stamp",
            digest=sources_digest(sources, FILES),
            build=lambda: go_build(
                f"building {what}",
                module=sources,
                binary=binary,
                ldflags="-s -w",
                go_env=settings.go_env,
                error=GoRefBuildError,
            ),
            started=started,
        )
    return result.binary
