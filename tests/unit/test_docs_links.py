"""Every relative link in the user-facing Markdown (README, docs/, the chart's and images'
READMEs, SECURITY, CHANGELOG) names a file or directory that exists in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [REPO / "README.md", REPO / "SECURITY.md", REPO / "CHANGELOG.md", *REPO.glob("docs/*.md"),
     REPO / "charts" / "vgpu-bridge" / "README.md", REPO / "images" / "README.md"]
)  # fmt: skip
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_name_files_that_exist(page: Path) -> None:
    assert page.is_file(), page
    broken = [
        link
        for link in LINK.findall(page.read_text())
        if "://" not in link and not link.startswith("mailto:")
        and not (page.parent / link).exists()
    ]  # fmt: skip
    assert broken == [], f"{page.relative_to(REPO)}: broken links {broken}"
