"""Clicks, typing, select, upload and secret masking into open shadow roots, a same-origin iframe and a
cross-origin one (another site: its own renderer), by viewport coordinates as the agent acts; and
uploads through a file input and through an upload button's file chooser."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent.browser.secretpage import SecretPage
from webagent.browser.session import BrowserSession
from webagent.config import PROFILES, BrowserConfig
from webagent.errors import ActionError
from webagent.files.uploads import AllowedFiles, Upload
from webagent.guard.secrets import Secrets
from webagent.images import frame_for
from webagent.testing.teampages import FRAME_COLUMNS, FRAME_ROWS
from webagent.testing.teamsite import TeamSite

pytestmark = pytest.mark.browser

PLACES = list(FRAME_COLUMNS)
CONTENT = b"%PDF-1.4 team report " * 50
DIGEST = hashlib.sha256(CONTENT).hexdigest()


@pytest.fixture(scope="module")
def team_site() -> Iterator[TeamSite]:
    with TeamSite() as site:
        yield site


@pytest.fixture
async def session(browser: Browser) -> AsyncIterator[BrowserSession]:
    session = await BrowserSession.create(browser, BrowserConfig())
    yield session
    await session.close()


@pytest.fixture
def upload(tmp_path: Path) -> Upload:
    (tmp_path / "report.pdf").write_bytes(CONTENT)
    return AllowedFiles(tmp_path).open("report.pdf")


async def _until(check: Callable[[], object], timeout_s: float = 15.0) -> None:
    """Poll ``check`` (what the site or the page has recorded) until it holds, within ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        for _ in itertools.count():
            if check():
                return
            await asyncio.sleep(0.05)


async def _event(site: TeamSite, who: str, kind: str, after: int) -> dict[str, Any]:
    """The last ``kind`` event of ``who`` recorded since the site had ``after`` events (the module's
    earlier tests, on the same site, record the same kinds: one of theirs is not this action's)."""

    def matching() -> list[dict[str, Any]]:
        return [e for e in site.events[after:] if e["who"] == who and e["kind"] == kind]

    await _until(matching)
    return matching()[-1]


async def _frames_page(session: BrowserSession, site: TeamSite) -> None:
    await session.goto(f"{site.url}/frames/", start=True)
    page = session.page
    await _until(lambda: len(page.frames) >= 3 and all(f.url != "about:blank" for f in page.frames))
    cross = next(f for f in page.frames if "who=cross" in f.url)
    assert cross.url.startswith(site.other_origin)  # another site: Chromium's own process for it
    # As the agent acts: on what a screenshot showed. A frame's URL is known from its commit, before
    # its document is laid out and painted; a click at it before then can find nothing to hit.
    for frame in page.frames:
        await frame.wait_for_load_state("load", timeout=15_000)
    await session.screenshot(frame_for(*session.viewport, PROFILES["holo1"]))


@pytest.mark.parametrize("place", PLACES)
async def test_typing_select_click_and_upload_reach_the_control_under_the_point(
    session: BrowserSession, team_site: TeamSite, upload: Upload, place: str
) -> None:
    await _frames_page(session, team_site)
    x = FRAME_COLUMNS[place]
    mark = len(team_site.events)
    await session.write(x, FRAME_ROWS["text"], f"hello {place}", press_enter=True)
    typed = await _event(team_site, place, "text", mark)
    assert typed["value"] == f"hello {place}" and typed["focused"] == "text"  # the focus in the right document
    mark = len(team_site.events)
    assert await session.select_option(x, FRAME_ROWS["select"], "beta") == "beta"
    assert (await _event(team_site, place, "select", mark))["value"] == "beta"
    mark = len(team_site.events)
    await session.click(x, FRAME_ROWS["button"])
    assert (await _event(team_site, place, "button", mark))["value"] == "pressed"
    outcome = await session.upload_file(x, FRAME_ROWS["file"], upload)
    assert outcome == "ok, gave the file 'report.pdf' to the page"
    await _until(lambda: [u for u in team_site.uploads if u["from"] == place])
    got = next(u for u in team_site.uploads if u["from"] == place)
    assert got["name"] == "report.pdf" and got["sha256"] == DIGEST


@pytest.mark.parametrize("place", PLACES)
async def test_a_secret_typed_into_a_frame_or_shadow_root_is_masked_there(
    session: BrowserSession, team_site: TeamSite, place: str
) -> None:
    await _frames_page(session, team_site)
    # The page's host and the cross-origin frame's (localhost) are the secret's.
    hosts = {"TOKEN": [f"127.0.0.1:{team_site.port}", f"localhost:{team_site.port}"]}
    page = SecretPage(session, Secrets({"TOKEN": "frame-secret-123"}, hosts=hosts))
    mark = len(team_site.events)  # the first test typed "hello <place>" into the same field
    await page.write(FRAME_COLUMNS[place], FRAME_ROWS["text"], "{{TOKEN}}", press_enter=True)
    assert (await _event(team_site, place, "text", mark))["value"] == "frame-secret-123"
    frame = (
        next(f for f in session.page.frames if f"who={place}" in f.url)
        if place != "shadow"
        else session.page.main_frame
    )
    masked = await frame.evaluate(
        """() => { const root = document.getElementById('host') && document.getElementById('host').shadowRoot;
                   const el = (root || document).getElementById('text');
                   return getComputedStyle(el).webkitTextSecurity; }"""
    )
    assert masked == "disc"


@pytest.mark.parametrize("place", PLACES)
async def test_a_secret_is_typed_only_where_its_hosts_allow_the_field_and_the_page(
    session: BrowserSession, team_site: TeamSite, place: str
) -> None:
    await _frames_page(session, team_site)
    value = "frame-only-secret-77"
    # Allowed on the page's host only: not into the cross-origin frame (localhost), whose page would
    # receive every key; into the page's own fields and its same-origin frame, as before.
    page = SecretPage(session, Secrets({"TOKEN": value}, hosts={"TOKEN": [f"127.0.0.1:{team_site.port}"]}))
    mark = len(team_site.events)
    if place == "cross":
        with pytest.raises(ActionError) as info:
            await page.write(FRAME_COLUMNS[place], FRAME_ROWS["text"], "{{TOKEN}}", press_enter=True)
        message = str(info.value)
        assert message.startswith(f"the secret TOKEN was not typed: it may not be typed on localhost:{team_site.port}")
        assert f"allowed: 127.0.0.1:{team_site.port}" in message and "--secret-host TOKEN=HOST" in message
        frame = next(f for f in session.page.frames if "who=cross" in f.url)
        field = "document.getElementById('host').shadowRoot.getElementById('text').value"
        assert await frame.evaluate(f"() => {field}") != value  # not one key reached it
        await session.page.wait_for_timeout(300)
        assert not [e for e in team_site.events[mark:] if value in str(e)]
    else:
        await page.write(FRAME_COLUMNS[place], FRAME_ROWS["text"], "{{TOKEN}}", press_enter=True)
        assert (await _event(team_site, place, "text", mark))["value"] == value
    # With no hosts of its own and none for the run, a secret is typed nowhere, not even on the page.
    nowhere = SecretPage(session, Secrets({"TOKEN": value}))
    with pytest.raises(ActionError, match=r"may not be typed on 127\.0\.0\.1:\d+ \(allowed: no host in this run\)"):
        await nowhere.write(FRAME_COLUMNS["shadow"], FRAME_ROWS["text"], "{{TOKEN}}", press_enter=False)


async def test_an_upload_button_gets_the_file_through_its_chooser(
    session: BrowserSession, team_site: TeamSite, upload: Upload
) -> None:
    for path, origin in (("/upload", "upload"), ("/upload/button", "button")):
        await session.goto(f"{team_site.url}{path}", start=True)
        assert await session.upload_file(400, 200, upload) == "ok, gave the file 'report.pdf' to the page"
        await _until(lambda origin=origin: [u for u in team_site.uploads if u["from"] == origin])
        # The page writes its result once the server's reply is back, after the site recorded it.
        await session.page.wait_for_function(
            "() => document.querySelector('#result').innerText.includes('Uploaded: report.pdf')", timeout=15_000
        )
    assert not [e for e in session.drain_events() if "file chooser" in e]  # the chooser was answered, not dismissed


async def test_no_chooser_no_input_is_an_action_error(
    session: BrowserSession, team_site: TeamSite, upload: Upload
) -> None:
    await session.goto(f"{team_site.url}/upload", start=True)
    with pytest.raises(ActionError, match="no file chooser opened there"):
        await session.upload_file(900, 600, upload)
    with pytest.raises(ActionError, match="not a dropdown"):
        await session.select_option(400, 200, "beta")
