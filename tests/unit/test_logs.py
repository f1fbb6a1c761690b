"""Log lines: JSON, one per line, through structlog. While deferred (the webhook's start), lines
are kept without loading structlog and written by `load()` in order, with the time they were
logged; past MAX_PENDING, or when the process ends first, they are written all the same. Each case
runs in a fresh interpreter, as a binary starts."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

PRELUDE = """
import sys, time
from vgpu_bridge import logs
log = logs.get_logger("vgpu_bridge.test")
"""


def run(script: str) -> tuple[list[dict[str, Any]], str]:
    """(the JSON lines on stdout, what else was printed there)."""
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + script], capture_output=True, text=True, check=True
    )
    lines, other = [], []
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
        else:
            other.append(line)
    return lines, "\n".join(other)


def test_deferred_lines_wait_for_load_and_keep_their_order_and_time() -> None:
    lines, printed = run("""
logs.configure_json_logging(defer=True)
log.info("first", n=1)
log.warning("second", n=2)
print("structlog loaded before load():", "structlog" in sys.modules, flush=True)
time.sleep(0.05)
before_load = time.time()
print("load at", before_load, flush=True)
logs.load()
log.info("third", n=3)
""")
    assert "structlog loaded before load(): False" in printed
    assert [(line["event"], line["level"], line["n"]) for line in lines] == [
        ("first", "info", 1), ("second", "warning", 2), ("third", "info", 3)
    ]  # fmt: skip
    assert lines[0]["timestamp"] < lines[2]["timestamp"]
    assert all(line["timestamp"].endswith("Z") for line in lines)


def test_a_deferred_exception_keeps_its_traceback() -> None:
    lines, _ = run("""
logs.configure_json_logging(defer=True)
try:
    {}["missing"]
except KeyError:
    log.exception("lookup failed", what="x")
logs.load()
""")
    (line,) = lines
    assert line["event"] == "lookup failed"
    assert line["level"] == "error"
    assert "KeyError: 'missing'" in line["exception"]


def test_past_the_most_kept_lines_structlog_loads_and_writes_them_all() -> None:
    lines, printed = run("""
logs.MAX_PENDING = 3
logs.configure_json_logging(defer=True)
for n in range(5):
    log.info("line", n=n)
print("structlog loaded:", "structlog" in sys.modules, flush=True)
""")
    assert "structlog loaded: True" in printed
    assert [line["n"] for line in lines] == [0, 1, 2, 3, 4]


def test_lines_kept_when_the_process_ends_before_load_are_written() -> None:
    lines, _ = run("""
logs.configure_json_logging(defer=True)
log.error("cannot go on", reason="test")
""")
    assert [(line["event"], line["reason"]) for line in lines] == [("cannot go on", "test")]


def test_without_deferral_a_line_is_json_at_once() -> None:
    lines, printed = run("""
logs.configure_json_logging()
log.info("now", n=1)
print("structlog loaded:", "structlog" in sys.modules, flush=True)
""")
    assert "structlog loaded: True" in printed
    assert [(line["event"], line["level"]) for line in lines] == [("now", "info")]


def test_at_the_default_level_info_a_debug_line_is_dropped() -> None:
    lines, _ = run("""
logs.configure_json_logging()
log.debug("detail", n=1)
log.info("kept", n=2)
""")
    assert [line["event"] for line in lines] == ["kept"]


def test_at_level_debug_a_debug_line_is_written() -> None:
    lines, _ = run("""
logs.configure_json_logging(level="debug")
log.debug("detail", n=1)
""")
    assert [(line["event"], line["level"]) for line in lines] == [("detail", "debug")]


def test_at_level_warning_info_is_dropped_and_errors_with_tracebacks_are_kept() -> None:
    lines, _ = run("""
logs.configure_json_logging(level="warning")
log.info("routine")
log.warning("odd")
try:
    {}["missing"]
except KeyError:
    log.exception("failed")
""")
    assert [(line["event"], line["level"]) for line in lines] == [
        ("odd", "warning"), ("failed", "error")
    ]  # fmt: skip


def test_a_deferred_debug_line_below_the_level_is_not_kept() -> None:
    lines, printed = run("""
logs.configure_json_logging(defer=True, level="info")
log.debug("detail")
print("kept:", len(logs._setup.pending), flush=True)
logs.load()
""")
    assert "kept: 0" in printed
    assert lines == []


def test_structlog_called_directly_is_filtered_at_the_same_level() -> None:
    lines, _ = run("""
logs.configure_json_logging(level="error")
log.error("ours")  # structlog loads and is configured with our first line
import structlog
structlog.get_logger("direct").warning("dropped")
structlog.get_logger("direct").error("kept")
""")
    assert [line["event"] for line in lines] == ["ours", "kept"]


def test_an_unknown_level_is_refused_naming_the_choices() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + 'logs.configure_json_logging(level="verbose")'],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "log level: 'verbose' is not one of debug, info, warning, error" in done.stderr
