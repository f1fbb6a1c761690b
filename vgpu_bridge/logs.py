"""Both binaries log one JSON object per line (structlog), with level and ISO timestamp."""

from __future__ import annotations

import structlog


def configure_json_logging() -> None:
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        cache_logger_on_first_use=True,  # each module's logger is bound once, not per line
    )
