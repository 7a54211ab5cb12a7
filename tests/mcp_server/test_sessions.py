"""The kept sessions: a guard for their whole life, unguessable ids, closing (on a failed open,
when idle, after the call in flight), and following a run's new tab."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from playwright.async_api import Browser, Page

from webagent.agent import Agent
from webagent.browser.session import BrowserSession
from webagent.config import AgentConfig
from webagent.errors import BrowserError, NavigationError
from webagent.mcp_server import WebagentMCP
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory, load_task_script, make_config
from ..pilot.conftest import page  # noqa: F401 (a fixture)
from .conftest import GOAL, local_config, script, text_of

pytestmark = pytest.mark.e2e

Serve = Callable[..., AbstractAsyncContextManager[tuple[WebagentMCP, Client]]]
TABS_GOAL = "Open the details of your latest order (they open in a new tab) and report the order number."


@pytest.fixture
def serve(browser: Browser, tmp_path: Path) -> Serve:
    """``async with serve(config, **kwargs) as (app, client)``: a server in process and its client."""

    @asynccontextmanager
    async def open_server(config: AgentConfig, **kwargs: Any) -> AsyncIterator[tuple[WebagentMCP, Client]]:
        app = WebagentMCP(config, output_dir=tmp_path / "runs", browser=browser, **kwargs)
        try:
            async with Client(app.server) as client:
                yield app, client
        finally:
            await app.aclose()

    return open_server


async def _open(client: Client, url: str) -> str:
    opened = await client.call_tool("open_session", {"url": url})
    assert opened.structured_content is not None, text_of(opened)
    return str(opened.structured_content["session_id"])


def _localhost(site: SiteServer, path: str) -> str:
    return site.url.replace("127.0.0.1", "localhost") + path


async def test_a_page_that_navigates_itself_between_calls_stays_under_the_sessions_policy(
    model_server: ServerFactory, serve: Serve, site: SiteServer
) -> None:
    async with model_server(script()) as server:
        config = local_config(server)
        config.browser.blocked_domains = ["localhost"]  # the same site under a name the policy refuses
        async with serve(config) as (app, client):
            sid = await _open(client, f"{site.url}/catalog/")
            page = app.sessions.get(sid).pilot.page
            await page.evaluate(f"setTimeout(() => {{ location.href = {_localhost(site, '/catalog/search?q=x')!r} }})")
            with contextlib.suppress(Exception):
                await page.wait_for_url("**localhost**", timeout=3000)
            check = await client.call_tool("check", {"session_id": sid, "statement": "search results are shown"})
            shot = await client.call_tool("screenshot", {"session_id": sid})
            acted = await client.call_tool("act", {"session_id": sid, "goal": GOAL})  # under the same guard
    assert page.url.startswith(site.url), "the refused navigation went through"
    assert check.structured_content is not None and check.structured_content["url"] == f"{site.url}/catalog/"
    assert not check.structured_content["holds"]
    assert not shot.is_error
    assert acted.structured_content is not None and acted.structured_content["success"], text_of(acted)


async def test_a_pilot_with_a_fixed_policy_does_not_read_a_page_it_refuses(
    model_server: ServerFactory,
    site: SiteServer,
    page: Page,  # noqa: F811
) -> None:
    async with model_server(script()) as server:
        config = make_config(server)
        config.browser.blocked_domains = ["localhost"]
        agent = Agent(config)
        policy = agent.navigation_policy(f"{site.url}/catalog/")
        await page.goto(_localhost(site, "/catalog/product/blue-widget"))  # moved there unguarded
        fenced = agent.pilot(page, policy=policy)
        for call in (
            fenced.screenshot(),
            fenced.check("The page shows the Blue Widget"),
            fenced.extract_json("the name", _any_schema()),
            fenced.act(GOAL, max_steps=1),
        ):
            with pytest.raises(NavigationError, match=r"navigation policy refuses \(localhost is blocked"):
                await call
        assert (await agent.pilot(page).screenshot()).startswith(b"\x89PNG")  # a library pilot: as before
        await agent.aclose()


def _any_schema() -> Any:
    from webagent.roles.extractor import ExtractionSchema

    return ExtractionSchema({"type": "object"}, lambda text: text, name="anything")


async def test_ids_are_unguessable_and_errors_name_no_other_session(
    model_server: ServerFactory, serve: Serve, site: SiteServer
) -> None:
    async with model_server(script()) as server, serve(local_config(server), max_sessions=2) as (_, client):
        first = await _open(client, f"{site.url}/catalog/")
        second = await _open(client, f"{site.url}/catalog/")
        unknown = await client.call_tool("screenshot", {"session_id": first[:-1]})
        full = await client.call_tool("open_session", {"url": f"{site.url}/catalog/"})
    assert len(first) >= 20 and first != second
    for result in (unknown, full):
        assert result.is_error
        assert first not in text_of(result) and second not in text_of(result), text_of(result)


async def test_a_session_whose_open_fails_after_the_page_opened_is_closed(
    model_server: ServerFactory, serve: Serve, site: SiteServer, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    title = BrowserSession.title
    contexts = len(browser.contexts)
    failures = [BrowserError("the page does not answer")]

    async def failing_title(self: BrowserSession) -> str:
        if failures:
            raise failures.pop()
        return await title(self)

    monkeypatch.setattr(BrowserSession, "title", failing_title)
    async with model_server(script()) as server, serve(local_config(server), max_sessions=1) as (app, client):
        failed = await client.call_tool("open_session", {"url": f"{site.url}/catalog/"})
        assert app.sessions.ids == [] and len(browser.contexts) == contexts
        again = await client.call_tool("open_session", {"url": f"{site.url}/catalog/"})
    assert failed.is_error and "BrowserError: the page does not answer" in text_of(failed)
    assert not again.is_error, text_of(again)


async def test_an_idle_session_is_closed(model_server: ServerFactory, serve: Serve, site: SiteServer) -> None:
    async with model_server(script()) as server, serve(local_config(server), session_idle_timeout_s=0.5) as (app, c):
        sid = await _open(c, f"{site.url}/catalog/")
        await asyncio.sleep(0.3)
        used = await c.call_tool("screenshot", {"session_id": sid})  # a call: not idle yet
        await asyncio.sleep(0.3)
        assert app.sessions.ids == [sid]
        await asyncio.sleep(1.0)
        assert app.sessions.ids == []  # closed by the background check, without a call
        gone = await c.call_tool("screenshot", {"session_id": sid})
    assert not used.is_error
    assert gone.is_error and "no open session has the id" in text_of(gone)


async def test_close_session_waits_for_the_call_in_flight(
    model_server: ServerFactory, serve: Serve, site: SiteServer
) -> None:
    data = script()
    data["latency_s"] = {"policy": 0.5}
    async with model_server(data) as server, serve(local_config(server)) as (_, client):
        sid = await _open(client, f"{site.url}/catalog/")
        acting = asyncio.ensure_future(client.call_tool("act", {"session_id": sid, "goal": GOAL}))
        await asyncio.sleep(0.3)
        closed = await client.call_tool("close_session", {"session_id": sid})
        assert acting.done()
        acted = acting.result()
    assert not closed.is_error
    assert acted.structured_content is not None and acted.structured_content["success"], text_of(acted)


async def test_after_act_the_session_shows_the_tab_the_run_ended_on(
    model_server: ServerFactory, serve: Serve, site: SiteServer
) -> None:
    async with model_server(load_task_script("tabs-order")) as server, serve(local_config(server)) as (app, client):
        sid = await _open(client, f"{site.url}/tabs/")
        acted = await client.call_tool("act", {"session_id": sid, "goal": TABS_GOAL})
        kept = app.sessions.get(sid)
        shot = await client.call_tool("screenshot", {"session_id": sid})
        assert acted.structured_content is not None and acted.structured_content["answer"] == "ORD-58213"
        assert acted.structured_content["final_url"] == f"{site.url}/tabs/details.html"
        assert kept.pilot.page.url == f"{site.url}/tabs/details.html"
        assert kept.session.page is kept.pilot.page  # the session's guard watches that tab
        assert not shot.is_error
