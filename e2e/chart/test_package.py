"""`make chart`'s package: the archive holds what an install needs (README, schema, templates,
NOTES) and nothing of the repository, and renders exactly what the chart directory renders."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
import yaml

from e2e.chart.packaging import package
from e2e.chart.rendering import CHART, KUBE_VERSION, Helm

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def archive(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return package(helm, tmp_path_factory.mktemp("dist"))


def test_the_archive_is_named_after_the_charts_version(archive: Path) -> None:
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    assert archive.name == f"vgpu-bridge-{version}.tgz"


def test_the_archive_holds_the_readme_schema_notes_and_templates(archive: Path) -> None:
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    expected = {"Chart.yaml", "values.yaml", "values.schema.json", "README.md"}
    expected |= {f"templates/{p.name}" for p in (CHART / "templates").iterdir()}
    expected |= {f"files/{p.name}" for p in (CHART / "files").iterdir()}
    assert {f"vgpu-bridge/{name}" for name in expected} <= names
    assert not [name for name in names if "__pycache__" in name or name.endswith("~")]


def test_the_archive_renders_what_the_directory_renders(helm: Helm, archive: Path) -> None:
    def render(chart: Path) -> list[object]:
        out = helm.run(
            "template", "vb", str(chart), "--namespace", "vb", "--kube-version", KUBE_VERSION,
            "--set", "tls.mode=cert-manager",  # no generated key material: renders are equal
        )  # fmt: skip
        return [doc for doc in yaml.safe_load_all(out) if doc]

    assert render(archive) == render(CHART)


def test_a_chart_that_fails_strict_lint_is_not_packaged(helm: Helm, tmp_path: Path) -> None:
    broken = tmp_path / "vgpu-bridge"
    broken.mkdir()
    (broken / "Chart.yaml").write_text("apiVersion: v2\nname: vgpu-bridge\nversion: 0.0.1\n")
    (broken / "values.yaml").write_text("a: 1\n")
    (broken / "templates").mkdir()
    (broken / "templates" / "cm.yaml").write_text(
        "kind: ConfigMap\nmetadata: {name: {{ .Values.b }}}\n"
    )
    with pytest.raises(AssertionError, match="lint"):
        package(helm, tmp_path / "dist", chart=broken)
    assert not (tmp_path / "dist").exists()
