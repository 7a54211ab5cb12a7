"""An upload's check and its use are one operation: a file of the upload folder that another user swaps
for a link to an outside file, after webagent's check and before the browser reads it, never
reaches the page -- through a file input or an upload button's chooser. What the page received is
checked on the server's side."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import pytest
from playwright.async_api import Browser

from webagent.actions import UploadFile
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.files.uploads import AllowedFiles, Upload
from webagent.loop.page import PageDriver, perform
from webagent.records import Point
from webagent.testing.teamsite import TeamSite

pytestmark = pytest.mark.browser

DECOY = b"%PDF-1.4 a harmless report " * 40
OUTSIDE = b"ssh-ed25519 the other user's key" + b"." * (len(DECOY) - 32)  # the same size


@pytest.fixture(scope="module")
def team_site() -> Iterator[TeamSite]:
    with TeamSite() as site:
        yield site


@pytest.fixture
async def session(browser: Browser) -> AsyncIterator[BrowserSession]:
    session = await BrowserSession.create(browser, BrowserConfig())
    yield session
    await session.close()


class SwappedAfterTheCheck:
    """The session, except that the allowed file is swapped for a link to an outside file (same size
    and modification time) just before the browser is given it: the moment between webagent's check
    and its use, made to happen every time."""

    def __init__(self, session: BrowserSession, allowed: Path, outside: Path) -> None:
        self.session = session
        self.allowed = allowed
        self.outside = outside

    async def upload_file(self, x: float, y: float, file: Upload) -> str:
        stamp = self.allowed.stat()
        self.allowed.unlink()
        self.allowed.symlink_to(self.outside)
        os.utime(self.outside, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        return await self.session.upload_file(x, y, file)


@pytest.mark.parametrize(("path", "origin"), [("/upload", "upload"), ("/upload/button", "button")])
async def test_a_file_swapped_for_a_link_after_the_check_never_reaches_the_page(
    session: BrowserSession, team_site: TeamSite, tmp_path: Path, path: str, origin: str
) -> None:
    folder = tmp_path / "uploads"
    folder.mkdir()
    allowed = folder / "report.pdf"
    allowed.write_bytes(DECOY)
    outside = tmp_path / "id_ed25519"
    outside.write_bytes(OUTSIDE)
    await session.goto(f"{team_site.url}{path}", start=True)
    before = len(team_site.uploads)
    page = SwappedAfterTheCheck(session, allowed, outside)
    action = UploadFile(element="the upload control", file="report.pdf")
    point = Point(image=(400, 200), viewport=(400, 200))
    outcome = await perform(cast(PageDriver, page), action, point, AllowedFiles(folder))
    assert outcome == "ok, gave the file 'report.pdf' to the page" and allowed.is_symlink()
    async with asyncio.timeout(15):  # the page posts the file it was given to the site
        while not [u for u in team_site.uploads[before:] if u["from"] == origin]:  # noqa: ASYNC110 (another thread's list)
            await asyncio.sleep(0.05)
    [got] = [u for u in team_site.uploads[before:] if u["from"] == origin]
    assert got["sha256"] != hashlib.sha256(OUTSIDE).hexdigest()  # the outside file never left
    assert got["name"] == "report.pdf" and got["sha256"] == hashlib.sha256(DECOY).hexdigest()
