"""``python -m e2e.prometheus fetch``: fetch or reuse prometheus and promtool; prints one line."""

from __future__ import annotations

import sys

from e2e.cluster.settings import Settings, SettingsError
from e2e.prometheus.install import PrometheusInstallError, ensure_prometheus

USAGE = "usage: python -m e2e.prometheus fetch"


def main(argv: list[str]) -> int:
    if argv != ["fetch"]:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        tools = ensure_prometheus(Settings.from_env())
    except (PrometheusInstallError, SettingsError) as error:
        print(error, file=sys.stderr)
        return 1
    how = "reused" if tools.reused else "fetched"
    print(f"prometheus {tools.package_version} ({how}): {tools.prometheus.parent}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
