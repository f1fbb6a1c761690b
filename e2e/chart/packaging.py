"""``make chart``: lint the chart strictly and package it (``python -m e2e.chart package``).

The README check runs first in the Makefile (scripts/chart_readme.py --check); here helm, built
by ``make helm-bin``, lints with ``--strict`` and writes ``<destination>/<name>-<version>.tgz``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from e2e.chart.rendering import CHART, Helm

DESTINATION = CHART.parents[1] / "dist"


def package(helm: Helm, destination: Path = DESTINATION, chart: Path = CHART) -> Path:
    """The packaged chart's path; HelmFailed (with helm's output) when lint or package fail."""
    helm.run("lint", "--strict", str(chart), "--namespace", "vgpu-bridge")
    destination.mkdir(parents=True, exist_ok=True)
    helm.run("package", str(chart), "--destination", str(destination))
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    archive = destination / f"{meta['name']}-{meta['version']}.tgz"
    if not archive.is_file():
        raise FileNotFoundError(f"helm package wrote no {archive}")
    return archive
