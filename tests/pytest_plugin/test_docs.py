"""docs/pytest.md's complete example, run as it is written: its files, the offline model server on
the script it names and the local shop (on free ports: the URLs are the only difference)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from webagent.testing.sites import SiteServer

from .conftest import Project, calls

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

DOC = Path(__file__).resolve().parents[2] / "docs" / "pytest.md"


def named_blocks(text: str) -> dict[str, str]:
    """The code blocks preceded by a bold file name (``**test_shop.py**``)."""
    return dict(re.findall(r"^\*\*([\w.]+)\*\*\n\n```\w*\n(.*?)^```", text, re.M | re.S))


def test_the_documented_example_passes(project: Project, monkeypatch: pytest.MonkeyPatch, site: SiteServer) -> None:
    text = DOC.read_text(encoding="utf-8")
    files = named_blocks(text)
    assert sorted(files) == ["pytest.ini", "test_shop.py"]
    assert "--script webagent/testing/data/scripts/catalog-price.json" in text  # the script the project's server plays
    (project.path / "tox.ini").unlink()  # the documented ini file only
    for name, source in files.items():
        project.write(name, source)
    monkeypatch.setenv("SHOP_URL", site.url)
    base_url = f"--webagent-base-url={project.server.url}/v1"
    project.run(base_url).assert_outcomes(passed=1)
    assert calls(project.server) == 8  # its second run costs none: test_sync.py
