"""An MCP session's named profile is a ``Profile`` folder (``DIR/<name>/``), locked for the
session's whole life: a second session on it -- of this server, or of another process -- is
refused with one line naming the profile, and the lock goes on every way a session ends (closed,
the server stopping, its browser lost). A profile of the older layout (``DIR/<name>.json``) moves
into its folder the first time it is opened."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from mcp import Client
from playwright.async_api import Browser

from webagent.browser.profile import Profile
from webagent.errors import InputError
from webagent.mcp_server import WebagentMCP
from webagent.mcp_server import sessions as mcp_sessions
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory
from .conftest import local_config, script, text_of

pytestmark = pytest.mark.e2e


def _free(profile: Path) -> bool:
    """Whether another holder (standing for another process) can take the profile now."""
    other = Profile(profile)
    try:
        other.acquire()
    except InputError:
        return False
    other.release()
    return True


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def _open(client: Client, url: str, profile: str) -> str:
    opened = await client.call_tool("open_session", {"url": url, "profile": profile})
    assert not opened.is_error, text_of(opened)
    return str(opened.structured_content["session_id"])  # type: ignore[index]


async def test_a_profile_serves_one_session_at_a_time_and_is_free_once_it_closes(
    browser: Browser, model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    profiles, url = tmp_path / "profiles", f"{site.url}/catalog/"
    async with model_server(script()) as server:
        app = WebagentMCP(local_config(server), browser=browser, profile_dir=profiles)
        try:
            async with Client(app.server) as client:
                first = await _open(client, url, "work")
                assert not _free(profiles / "work")  # held by the session, seen from outside too
                again = await client.call_tool("open_session", {"url": url, "profile": "work"})
                assert again.is_error and "profile 'work' is in use" in text_of(again)
                assert "\n" not in text_of(again).strip()
                other = await _open(client, url, "home")  # another profile is another lock
                await client.call_tool("close_session", {"session_id": first})
                assert _free(profiles / "work")
                await _open(client, url, "work")  # held again until the server stops
                assert not _free(profiles / "work") and not _free(profiles / "home")
                assert other
        finally:
            await app.aclose()
        assert _free(profiles / "work") and _free(profiles / "home")


async def test_a_profile_another_process_holds_is_refused_in_one_line(
    browser: Browser, model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    profiles, url = tmp_path / "profiles", f"{site.url}/catalog/"
    holder = Profile(profiles / "work")  # as `webagent session start --profile DIR/work` would
    holder.acquire()
    async with model_server(script()) as server:
        app = WebagentMCP(local_config(server), browser=browser, profile_dir=profiles)
        try:
            async with Client(app.server) as client:
                refused = await client.call_tool("open_session", {"url": url, "profile": "work"})
                text = text_of(refused)
                assert refused.is_error and "profile 'work' is in use by another session or process" in text
                assert str(profiles) not in text and "\n" not in text.strip()  # no server path to the client
                assert app.sessions.ids == []
                holder.release()
                await _open(client, url, "work")
        finally:
            holder.release()
            await app.aclose()


async def test_a_session_whose_browser_is_lost_gives_its_profile_back(
    browser: Browser, model_server: ServerFactory, site: SiteServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiles, url = tmp_path / "profiles", f"{site.url}/catalog/"
    monkeypatch.setattr(mcp_sessions, "LOST_CHECK_S", 0.1)  # the server's check, often (sessions are not idle)
    async with model_server(script()) as server:
        app = WebagentMCP(local_config(server), browser=browser, profile_dir=profiles)
        try:
            async with Client(app.server) as client:
                first = await _open(client, url, "work")
                await app.sessions.get(first).session.context.close()  # its browser is gone
                async with asyncio.timeout(30):  # the server's own check gives it back, to any process
                    while True:
                        if _free(profiles / "work"):
                            break
                        await asyncio.sleep(0.05)
                second = await _open(client, url, "work")
                await app.sessions.get(second).session.context.close()
                await _open(client, url, "work")  # a new session on it closes the lost one first
                assert second not in app.sessions.ids
        finally:
            await app.aclose()


async def test_a_profile_of_the_older_layout_moves_into_its_folder_once(
    browser: Browser, model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir(mode=0o700)
    cookie = {"name": "sid", "value": "s3cr3t-session-value", "domain": "127.0.0.1", "path": "/"}
    cookie |= {"expires": -1, "httpOnly": False, "secure": False, "sameSite": "Lax"}
    (profiles / "work.json").write_text(json.dumps({"cookies": [cookie], "origins": []}))
    async with model_server(script()) as server:
        app = WebagentMCP(local_config(server), browser=browser, profile_dir=profiles)
        try:
            async with Client(app.server) as client:
                run_state = app.sessions.saved_state("work")  # a run reads it where it is, not yet moved
                assert run_state == profiles.resolve() / "work.json"
                session = await _open(client, f"{site.url}/catalog/", "work")
                cookies = await app.sessions.get(session).session.context.cookies()
                assert [c["value"] for c in cookies if c["name"] == "sid"] == ["s3cr3t-session-value"]
                assert not (profiles / "work.json").exists()
                assert app.sessions.saved_state("work") == profiles.resolve() / "work" / "state.json"
        finally:
            await app.aclose()
    saved = json.loads((profiles / "work" / "state.json").read_text())
    assert [c["value"] for c in saved["cookies"] if c["name"] == "sid"] == ["s3cr3t-session-value"]


async def test_profile_names_stay_inside_the_profile_dir(
    browser: Browser, model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir(mode=0o700)
    (profiles / "link").symlink_to(tmp_path)  # a name that is a link out of the folder
    async with model_server(script()) as server:
        app = WebagentMCP(local_config(server), browser=browser, profile_dir=profiles)
        try:
            async with Client(app.server) as client:
                for name in ("../x", "..", ".hidden", "a/b", "link", "/etc"):
                    bad = await client.call_tool("open_session", {"url": f"{site.url}/catalog/", "profile": name})
                    assert bad.is_error and "is not valid" in text_of(bad), (name, text_of(bad))
        finally:
            await app.aclose()
    assert _names(tmp_path) == ["profiles"]  # nothing was made outside the profile folder
