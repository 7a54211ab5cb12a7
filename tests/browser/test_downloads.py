"""Downloads in a real Chromium: kept in the folder given, named safely, limited, refused, told.

The files come from the local site (``/downloads/``: ``webagent.testing.downloadsite``, and the CSV
export of ``/hands/export.html``). Each test checks what the policy is told (the events of the
action's observation, or of the next ones where the browser announced the download after the page
settled), what the session lists, and what is on disk: the folder given and nothing beside it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.async_api import Browser, Download

from webagent.browser.guard import NavigationGuard
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.files.downloads import MAX_NAME_BYTES, DownloadFolder
from webagent.guard.navigation import NavigationPolicy
from webagent.images import frame_for
from webagent.testing.downloadsite import FILE_BYTE, FLOOD_BYTES, LINK, file_path
from webagent.testing.hands import EXPORT, EXPORT_CSV
from webagent.testing.sites import SiteServer

pytestmark = pytest.mark.browser

FRAME = frame_for(1280, 800, None)
MIB = 1024 * 1024
Opener = Callable[..., Awaitable[BrowserSession]]
OVER = r"The page started (\d+) more downloads? past the 5 a run keeps"


def listing(root: Path) -> list[str]:
    """Every file and folder under ``root``, relative to it."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.is_dir() else {}


@pytest.fixture
async def open_session(browser: Browser, tmp_path: Path) -> AsyncIterator[Opener]:
    """A session keeping its downloads in ``tmp_path/run/downloads``, with ``BrowserConfig(**config)``."""
    sessions: list[BrowserSession] = []

    async def factory(guard: NavigationGuard | None = None, **config: Any) -> BrowserSession:
        session = await BrowserSession.create(browser, BrowserConfig(**config), guard=guard)
        sessions.append(session)
        if guard is not None:
            await session.set_guard(guard)
        session.keep_downloads(DownloadFolder(tmp_path / "run" / "downloads"))
        return session

    yield factory
    for session in sessions:
        await session.close()


#: How the line that tells what became of an action's download begins.
TOLD = ("Downloaded: ", "The download of ", "The page started ", "Blocked ")
RUNNING = "is in progress; it is told when it ends."


async def act(session: BrowserSession, url: str, point: tuple[float, float] = LINK, *, told: bool = True) -> list[str]:
    """Open ``url``, click ``point``, take the next observation: its events. ``told``: with those of
    the next observations until what became of the download is told, the lines saying it was still
    running left out. A download the browser announces only after the page has settled (on a loaded
    machine; a link with a download attribute, whose response comes later) is told one observation later."""
    await session.goto(url)
    await session.click(*point)
    await session.screenshot(FRAME)
    events = session.drain_events()
    if told:
        for _ in range(100):
            if any(e.startswith(TOLD) for e in events):
                break
            await asyncio.sleep(0.1)
            events += session.drain_events()
        events = [e for e in events if not e.endswith(RUNNING)]
    return events


def link_to(site: SiteServer, href: str, attr: str | None = None) -> str:
    return f"{site.url}/downloads/link?href={quote(href, safe='')}" + (f"&attr={quote(attr)}" if attr else "")


async def test_the_csv_export_is_kept_and_told(open_session: Opener, site: SiteServer, tmp_path: Path) -> None:
    session = await open_session()
    events = await act(session, EXPORT.url(site.url), EXPORT.elements["Export CSV button"])
    assert events == [f"Downloaded: orders.csv ({len(EXPORT_CSV)} bytes)"]
    [kept] = session.downloads
    assert kept.name == "orders.csv" and kept.bytes == len(EXPORT_CSV) and kept.url.startswith("blob:")
    assert kept.path == str(tmp_path / "run" / "downloads" / "orders.csv")
    assert contents(tmp_path / "run" / "downloads") == {"orders.csv": EXPORT_CSV}
    assert listing(tmp_path) == ["run", "run/downloads", "run/downloads/orders.csv"]


@pytest.mark.parametrize(
    ("suggested", "kept"),
    [
        ("../../etc/x", "_.._etc_x"),
        ("a\x01b\x1bc.txt", "a_b_c.txt"),
        (".env", "env"),
        ("d" * 300 + ".csv", "d" * (MAX_NAME_BYTES - 4) + ".csv"),
        ("", "file"),  # no name: Chromium names it after the URL's last segment
    ],
)
async def test_an_oddly_named_download_is_kept_under_a_safe_name_inside_the_folder(
    open_session: Opener, site: SiteServer, tmp_path: Path, suggested: str, kept: str
) -> None:
    session = await open_session()
    events = await act(session, link_to(site, file_path(suggested, 10)))
    [saved] = session.downloads
    assert events == [f"Downloaded: {saved.name} (10 bytes)"]
    # Chromium makes the name safe first (a path's separators, control characters); what it leaves
    # (a leading dot, a name longer than the limit) is made safe again.
    assert saved.name == kept
    assert listing(tmp_path) == ["run", "run/downloads", f"run/downloads/{saved.name}"]
    assert contents(tmp_path / "run" / "downloads") == {saved.name: FILE_BYTE * 10}


@pytest.mark.parametrize(
    ("attr", "kept"),
    [
        ("../.hidden\u202etxt.exe", "_.hidden_txt.exe"),
        (".profile", "profile.css"),
        ("a\u202eb.txt", "a_b.txt"),
        ("..", "download.css"),
    ],
)
async def test_a_link_s_download_attribute_is_made_safe_too(
    open_session: Opener, site: SiteServer, tmp_path: Path, attr: str, kept: str
) -> None:
    session = await open_session()
    # A file served with no name of its own: the attribute names it.
    events = await act(session, link_to(site, "/hands/style.css", attr=attr))
    [saved] = session.downloads
    assert events == [f"Downloaded: {saved.name} ({saved.bytes} bytes)"]
    assert saved.name == kept
    assert listing(tmp_path) == ["run", "run/downloads", f"run/downloads/{saved.name}"]


@pytest.mark.parametrize("direct_cdp", [True, False])
@pytest.mark.parametrize("sized", [True, False])
async def test_an_oversized_download_is_cancelled_and_told(
    open_session: Opener, site: SiteServer, tmp_path: Path, direct_cdp: bool, sized: bool
) -> None:
    """Past ``max_download_mb``: announced by its Content-Length, or seen growing (no length: sent
    slowly, so that it is cut off long before its end); nothing kept either way."""
    session = await open_session(max_download_mb=1, direct_cdp=direct_cdp)
    options = {} if sized else {"chunked": "1", "slow": "0.02"}
    url = file_path("big.bin", 64 * MIB, **options)
    events = await act(session, link_to(site, url))
    for _ in range(100):  # growing past the limit takes a few chunks: told in a later observation then
        if any("cancelled" in e for e in events):
            break
        await asyncio.sleep(0.1)
        events += session.drain_events()
    assert [e for e in events if "big.bin" in e] == [
        f"The download of 'big.bin' ({site.url}{url}) was cancelled: it is larger than 1 MB "
        "([browser] max_download_mb)."
    ], events
    assert session.downloads == [] and contents(tmp_path / "run" / "downloads") == {}
    # One at the limit is kept.
    events = await act(session, link_to(site, file_path("edge.bin", MIB)))
    assert events == [f"Downloaded: edge.bin ({MIB} bytes)"]


async def test_a_flood_of_a_thousand_downloads_keeps_a_few_and_is_told_in_one_line(
    open_session: Opener, site: SiteServer, tmp_path: Path
) -> None:
    session = await open_session(max_downloads=5)
    drains = [await act(session, f"{site.url}/downloads/flood?n=1000")]

    def told() -> int:
        return sum(int(m) for d in drains for e in d for m in re.findall(OVER, e))

    for _ in range(200):  # the page may still be starting them after the step's observation
        if told() + len(session.downloads) >= 1000:
            break
        await asyncio.sleep(0.1)
        drains.append(session.drain_events())
    kept = [e for d in drains for e in d if e.startswith("Downloaded:")]
    assert len(kept) == 5 and len(session.downloads) == 5
    assert told() == 995
    assert all(sum("past the 5 a run keeps" in e for e in d) <= 1 for d in drains)  # one line an observation
    assert all(e.startswith("Downloaded: flood-") or re.match(OVER, e) for d in drains for e in d), drains
    files = contents(tmp_path / "run" / "downloads")  # the first five to come, whichever frames they were
    assert len(files) == 5 and all(re.fullmatch(r"flood-\d+\.txt", n) for n in files), files
    assert set(files.values()) == {FILE_BYTE * FLOOD_BYTES}
    assert listing(tmp_path) == ["run", "run/downloads", *sorted(f"run/downloads/{n}" for n in files)]


async def test_a_download_that_breaks_off_is_told_as_failed(
    open_session: Opener, site: SiteServer, tmp_path: Path
) -> None:
    session = await open_session()
    url = file_path("cut.bin", 200_000, cut="1")
    events = await act(session, link_to(site, url))
    assert events == [f"The download of 'cut.bin' ({site.url}{url}) failed: canceled."]
    assert session.downloads == [] and contents(tmp_path / "run" / "downloads") == {}


async def test_a_download_past_its_time_limit_is_cancelled_and_told(
    open_session: Opener, site: SiteServer, tmp_path: Path
) -> None:
    session = await open_session(download_timeout_s=1.0, settle_timeout_s=0.5)
    events = await act(session, link_to(site, file_path("slow.bin", 8 * MIB, slow="0.5")), told=False)
    for _ in range(100):  # told running when the step settled (unless announced later), then cut off
        if any("did not finish" in e for e in events):
            break
        await asyncio.sleep(0.1)
        events += session.drain_events()
    assert events[-1] == (
        "The download of 'slow.bin' did not finish within 1 s ([browser] download_timeout_s); it was cancelled."
    )
    assert events[:-1] in ([], [f"A download of 'slow.bin' {RUNNING}"]), events
    assert session.downloads == [] and contents(tmp_path / "run" / "downloads") == {}


async def test_a_download_from_a_host_the_guard_refuses_never_starts(
    open_session: Opener, site: SiteServer, tmp_path: Path
) -> None:
    policy = NavigationPolicy.build(start_url=site.url, allowed=[f"127.0.0.1:{site.port}"])
    session = await open_session(guard=NavigationGuard(policy))
    forbidden = f"http://localhost:{site.port}" + file_path("x.bin", 100)
    site.download_hits.clear()
    for page in (link_to(site, forbidden), link_to(site, forbidden, attr="y.bin")):
        events = await act(session, page)
        assert events == [
            f"Blocked a navigation to {forbidden}: localhost is not in allowed_domains; the page stayed where it was."
        ]
    # A link on the allowed host that redirects there is refused at the redirect.
    redirect = "/safety/redirect?to=" + quote(forbidden, safe="")
    events = await act(session, link_to(site, redirect))
    assert events == [
        f"Blocked a redirect to {forbidden}: localhost is not in allowed_domains; the page stayed where it was."
    ]
    assert not [hit for hit in site.download_hits if hit[0].startswith("localhost")], site.download_hits
    assert session.downloads == [] and listing(tmp_path) == []


async def test_refuse_cancels_every_download_even_in_a_caller_s_context(
    browser: Browser, site: SiteServer, tmp_path: Path
) -> None:
    context = await browser.new_context(accept_downloads=True)  # the caller's choice: Playwright's default
    try:
        page = await context.new_page()
        session = BrowserSession(page, BrowserConfig(downloads="refuse"))
        session.keep_downloads(DownloadFolder(tmp_path / "downloads"))
        caller: list[Download] = []
        page.on("download", lambda download: caller.append(download))
        # Still running when it is cancelled (a small one may end first: Playwright's copy is then
        # the caller's, as its context chose; webagent keeps none either way).
        events = await act(session, link_to(site, file_path("x.bin", 8 * MIB, slow="0.1")))
        assert events == [
            "The page started a download of 'x.bin'; downloads are refused ([browser] downloads = \"refuse\"), "
            "so it was cancelled."
        ]
        assert [await d.failure() for d in caller] == ["canceled"]
        assert session.downloads == []
        await session.close()
    finally:
        await context.close()
    assert listing(tmp_path) == []


async def test_in_a_caller_s_context_a_copy_is_kept_and_the_caller_keeps_its_own(
    browser: Browser, site: SiteServer, tmp_path: Path
) -> None:
    context = await browser.new_context(accept_downloads=True)
    refusing = await browser.new_context(accept_downloads=False)
    try:
        page = await context.new_page()
        session = BrowserSession(page, BrowserConfig())
        session.keep_downloads(DownloadFolder(tmp_path / "downloads"))
        async with page.expect_download() as caught:
            events = await act(session, link_to(site, file_path("x.bin", 10)))
        assert events == ["Downloaded: x.bin (10 bytes)"]
        download = await caught.value
        assert (await download.path()).read_bytes() == FILE_BYTE * 10  # Playwright's copy is the caller's
        await session.close()
        # A caller's context that does not accept downloads: each is told as it ends, failed.
        other = BrowserSession(await refusing.new_page(), BrowserConfig())
        other.keep_downloads(DownloadFolder(tmp_path / "downloads"))
        events = await act(other, link_to(site, file_path("y.bin", 10)))
        assert len(events) == 1 and events[0].startswith("The download of 'y.bin'") and "failed" in events[0]
        await other.close()
    finally:
        await context.close()
        await refusing.close()
    assert listing(tmp_path) == ["downloads", "downloads/x.bin"]


async def test_of_two_sessions_on_one_page_the_last_takes_its_downloads(
    open_session: Opener, site: SiteServer, tmp_path: Path
) -> None:
    """An MCP session's own and a run on its page: the run keeps them in its folder, then the session again."""
    outer = await open_session()
    inner = BrowserSession(outer.page, BrowserConfig())
    inner.keep_downloads(DownloadFolder(tmp_path / "act" / "downloads"))
    assert await act(inner, link_to(site, file_path("first.bin", 3))) == ["Downloaded: first.bin (3 bytes)"]
    await inner.close()
    assert await act(outer, link_to(site, file_path("second.bin", 4))) == ["Downloaded: second.bin (4 bytes)"]
    assert contents(tmp_path / "act" / "downloads") == {"first.bin": FILE_BYTE * 3}
    assert contents(tmp_path / "run" / "downloads") == {"second.bin": FILE_BYTE * 4}
