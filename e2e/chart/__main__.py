"""``python -m e2e.chart build``: build or reuse helm (``make helm-bin``); prints one line.
``python -m e2e.chart package``: lint and package the chart into dist/ (``make chart``); prints
the archive's path."""

from __future__ import annotations

import sys

from e2e.chart.helmbin import HelmBuildError, ensure_helm, report
from e2e.chart.packaging import package
from e2e.chart.rendering import Helm, HelmFailed
from e2e.cluster.settings import Settings, SettingsError

USAGE = "usage: python -m e2e.chart build|package"


def main(argv: list[str]) -> int:
    if argv not in (["build"], ["package"]):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        built = ensure_helm(Settings.from_env())
        print(report(built) if argv == ["build"] else package(Helm(built.binary)))
    except (HelmBuildError, SettingsError, HelmFailed) as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
