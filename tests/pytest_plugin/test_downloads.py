"""The plugin's ``web.act`` lists the files the page downloaded, kept in the act's run folder: the
CSV export of ``/hands/export.html`` on pytest-playwright's page (its context accepts downloads, as
Playwright's do unless told otherwise), the offline model server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from webagent.testing.hands import EXPORT, EXPORT_CSV, export_script
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from .conftest import Project

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

EXPORT_TEST = f"""
from pathlib import Path


def test_export(web, page, shop):
    page.goto(shop)
    result = web.act({EXPORT.goal!r})
    assert result.success
    [kept] = result.downloads
    assert kept.name == "orders.csv" and kept.bytes == {len(EXPORT_CSV)}
    assert Path(kept.path).read_bytes() == {EXPORT_CSV!r}
    assert Path(kept.path).parent.name == "downloads" and Path(kept.path).parent.parent.name == "act-1"
"""


@pytest.fixture(scope="module")
def exporting() -> Iterator[FakeModelServer]:
    server = FakeModelServer(export_script())
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop_thread()


def test_web_act_returns_the_downloads(pytester: pytest.Pytester, exporting: FakeModelServer, site: SiteServer) -> None:
    project = Project(pytester, exporting, EXPORT.url(site.url))
    project.write("test_export.py", EXPORT_TEST)
    result = project.run("--webagent-cache", "off")
    result.assert_outcomes(passed=1)
