"""``python -m e2e.chart build``: build or reuse helm (``make helm-bin``); prints one line."""

from __future__ import annotations

import sys

from e2e.chart.helmbin import HelmBuildError, ensure_helm, report
from e2e.cluster.settings import Settings, SettingsError

USAGE = "usage: python -m e2e.chart build"


def main(argv: list[str]) -> int:
    if argv != ["build"]:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        print(report(ensure_helm(Settings.from_env())))
    except (HelmBuildError, SettingsError) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
