"""Both binaries log one JSON object per line (structlog), with level and ISO timestamp.

Importing structlog costs about 40 ms (it loads asyncio), a quarter of a restarted webhook's time
to its first answer. So modules take their logger from `get_logger`, which loads structlog when
the first line is logged, not at import; and the webhook defers even that
(`configure_json_logging(defer=True)`): the lines logged before `load()` are kept, stamped with
the time they were logged, and `load()` (on a background thread once the server is up) writes
them in order. The same pattern as the webhook's metrics (`webhook/metrics.py`).

The level (`--log-level`, `LOG_LEVELS`) is checked by `Logger` before a line is kept or handed
to structlog, so a dropped debug line costs a comparison, not a kept dict or a JSON rendering;
structlog's own filter is set to the same level for anything that calls it directly. Nothing of
ours logs through the standard library's `logging`, so it is left as it is.
"""

from __future__ import annotations

import atexit
import datetime
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from structlog.typing import EventDict, FilteringBoundLogger, WrappedLogger

MAX_PENDING = 10_000  # lines kept before structlog loads; past it, it loads at once

LogLevel = Literal["debug", "info", "warning", "error"]
"""The type of both binaries' `--log-level` setting (FlagSettings checks a Literal's choices)."""

LOG_LEVELS: tuple[LogLevel, ...] = ("debug", "info", "warning", "error")
"""The values of both binaries' `--log-level`, least severe first."""

_SEVERITY = {"debug": 10, "info": 20, "warning": 30, "error": 40}  # the standard library's numbers


@dataclass(frozen=True, slots=True)
class _Line:
    """A line logged before structlog has loaded, kept to be written in order."""

    logger: str
    method: str
    event: str
    fields: dict[str, Any]


class _Setup:
    """What `configure_json_logging` chose, and the lines kept until `load()`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.json_lines = False
        self.deferred = False
        self.least_severity = 0  # every line, until a binary configures a level
        self.pending: list[_Line] = []


_setup = _Setup()


def configure_json_logging(*, defer: bool = False, level: str = "info") -> None:
    """Every line from now on is JSON (applied when structlog loads; at once if it has), and
    lines less severe than `level` (one of LOG_LEVELS) are dropped. With `defer`, structlog is
    not loaded before `load()`: lines logged until then are kept."""
    if level not in _SEVERITY:
        raise ValueError(f"log level: {level!r} is not one of {', '.join(LOG_LEVELS)}")
    with _setup.lock:
        _setup.json_lines = True
        _setup.least_severity = _SEVERITY[level]
        _setup.deferred = defer and "structlog" not in sys.modules
        if "structlog" in sys.modules:
            _configure()
    if _setup.deferred:
        atexit.register(load)  # a process that ends before `load()` still writes its lines


def load() -> None:
    """Load structlog and write the lines kept until now, in the order they were logged. The
    import happens outside the lock: lines logged meanwhile are kept, never waiting for it."""
    import structlog  # noqa: F401

    with _setup.lock:
        _load_locked()


def _load_locked() -> None:
    import structlog

    if _setup.json_lines:
        _configure()
    _setup.deferred = False
    pending, _setup.pending = _setup.pending, []
    for line in pending:
        getattr(structlog.get_logger(line.logger), line.method)(line.event, **line.fields)


def _configure() -> None:
    import structlog

    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            _stamp_unless_stamped,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_setup.least_severity),
        cache_logger_on_first_use=True,  # each module's logger is bound once, not per line
    )


def _now() -> str:
    """The time as structlog's ISO TimeStamper writes it (UTC, with a Z)."""
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


def _stamp_unless_stamped(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """A kept line has the time it was logged; any other line gets the time now."""
    event_dict.setdefault("timestamp", _now())
    return event_dict


class Logger:
    """A module's logger: structlog's, loaded on the first line logged (or kept, while deferred)."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: FilteringBoundLogger | None = None

    def debug(self, event: str, **fields: Any) -> None:
        self._write("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._write("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._write("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._write("error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error line with the traceback of the exception being handled."""
        self._write("error", event, {**fields, "exc_info": sys.exc_info()})

    def _write(self, method: str, event: str, fields: dict[str, Any]) -> None:
        if _SEVERITY[method] < _setup.least_severity:
            return
        if self._logger is None:
            if self._keep(method, event, fields):
                return
            import structlog

            self._logger = structlog.get_logger(self._name)
        getattr(self._logger, method)(event, **fields)

    def _keep(self, method: str, event: str, fields: dict[str, Any]) -> bool:
        """Keep the line while deferred (True); else make sure structlog is set up (False)."""
        with _setup.lock:
            if _setup.deferred and len(_setup.pending) < MAX_PENDING:
                line = _Line(self._name, method, event, {**fields, "timestamp": _now()})
                _setup.pending.append(line)
                return True
            if _setup.deferred or (_setup.json_lines and "structlog" not in sys.modules):
                _load_locked()
            return False


def get_logger(name: str) -> Logger:
    return Logger(name)
