"""A real Prometheus for the e2e tier (issue 18): Debian's binaries unpacked into the cache
(`install.py`), a server over generated config and the chart's alert rules (`server.py`), and the
tests that prove the rules (promtool), the chart's monitoring objects and the dashboard."""
