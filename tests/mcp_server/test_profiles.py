"""Named profiles of kept sessions (``webagent mcp --profile-dir``): a client signs in once, and a later
session -- after a restart too -- starts signed in; the profile is written 0600 and its values are
redacted from what the tools return."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client
from playwright.async_api import Browser

from webagent.mcp_server import WebagentMCP
from webagent.testing.teamscripts import SIGN_IN_GOAL, team_script
from webagent.testing.teamsite import OTP_CODE, PASSWORD, TeamSite

from ..conftest import ServerFactory
from .conftest import local_config, text_of

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def team_site() -> Iterator[TeamSite]:
    with TeamSite() as site:
        yield site


async def test_a_profile_keeps_a_session_signed_in_across_restarts(
    browser: Browser, model_server: ServerFactory, team_site: TeamSite, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles"
    async with model_server(team_script(items=1)) as server:
        config = local_config(server)
        config.secrets = {"PASSWORD": PASSWORD, "OTP": OTP_CODE}  # type: ignore[assignment]
        config.secret_hosts = {name: [f"{team_site.host}:{team_site.port}"] for name in config.secrets}
        app = WebagentMCP(config, output_dir=tmp_path / "runs", browser=browser, profile_dir=profiles)
        try:
            async with Client(app.server) as client:
                opened = await client.call_tool("open_session", {"url": f"{team_site.url}/app/", "profile": "work"})
                session = opened.structured_content["session_id"]  # type: ignore[index]
                assert "/login" in opened.structured_content["url"]  # type: ignore[index]
                acted = await client.call_tool("act", {"session_id": session, "goal": SIGN_IN_GOAL})
                assert acted.structured_content is not None and acted.structured_content["success"], text_of(acted)
                again = await client.call_tool("open_session", {"url": team_site.url, "profile": "work"})
                assert again.is_error and "in use by another open session" in text_of(again)
                await client.call_tool("close_session", {"session_id": session})
        finally:
            await app.aclose()
        state = profiles / "work" / "state.json"
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
        assert stat.S_IMODE(state.parent.stat().st_mode) == 0o700
        sid = next(c["value"] for c in json.loads(state.read_text())["cookies"] if c["name"] == "sid")

        before = len(team_site.requests)  # a new server: the profile still signs the session in
        app = WebagentMCP(config, output_dir=tmp_path / "runs2", browser=browser, profile_dir=profiles)
        try:
            async with Client(app.server) as client:
                opened = await client.call_tool(
                    "open_session", {"url": f"{team_site.url}/app/whoami", "profile": "work"}
                )
                shown = opened.structured_content
                assert shown is not None and shown["title"] == "Session {{STORAGE_STATE}}", text_of(opened)
                assert sid not in json.dumps(shown)
                bad = await client.call_tool("open_session", {"url": team_site.url, "profile": "../etc/x"})
                assert bad.is_error and "is not valid" in text_of(bad)
        finally:
            await app.aclose()
        assert not [r for r in team_site.requests[before:] if r.path.startswith("/login")]
        written = b"".join(p.read_bytes() for p in (tmp_path / "runs").rglob("*") if p.is_file())
        assert sid.encode() not in written


async def test_profiles_need_a_profile_dir(browser: Browser, model_server: ServerFactory, tmp_path: Path) -> None:
    async with model_server(team_script(items=1)) as server:
        app = WebagentMCP(local_config(server), browser=browser)
        try:
            async with Client(app.server) as client:
                result = await client.call_tool("open_session", {"url": "http://127.0.0.1:9/", "profile": "work"})
        finally:
            await app.aclose()
    assert result.is_error and "--profile-dir" in text_of(result)
