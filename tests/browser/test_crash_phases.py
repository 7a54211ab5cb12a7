"""A dead target in every phase of a session's life is the infrastructure's (issue 43), never the task's
verdict nor a plain error; real Chromium, the offline model server, the local sites.

Each test kills what the run needs at one phase (a renderer through CDP ``Page.crash``, the context or
the browser closed under it: ``tests/browser/crashing.py``) and checks what the run makes of it:
``infrastructure: true`` on a failed result (in ``result.json`` too), a ``BrowserCrashError`` where
the call raises, or the result standing where the run had already ended. docs/faults.md tables the
phases; the batch's re-runs of these are in ``tests/batch/test_setup_crashes*.py``.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser
from pydantic import SecretStr

import webagent.record.state
from webagent import Agent
from webagent.browser.faults import MAX_PAGE_CRASHES, PageFaults
from webagent.browser.session import BrowserSession
from webagent.cli.parser import EXIT_FAILED
from webagent.cli.run import exit_status, run_task
from webagent.config import AgentConfig, BrowserConfig
from webagent.errors import BrowserCrashError
from webagent.record import TraceSink
from webagent.stream import SETUP_FAILED
from webagent.testing.server import FakeModelServer

from ..conftest import load_task_script, make_config
from .crashing import crash_at_set_up, crash_page, hook_before

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


@pytest.fixture
async def server() -> Any:
    async with FakeModelServer(load_task_script("local")) as running:
        yield running


def guarded(server: FakeModelServer) -> AgentConfig:
    """A config whose sessions install the navigation guard (an allow-list: every request judged)."""
    config = make_config(server)
    config.browser.allowed_domains = ["127.0.0.1"]
    return config


def result_file(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "result.json").read_text())
    return data


# -- before the first step ------------------------------------------------------------------------


async def test_a_renderer_crash_while_the_guard_is_installed_ends_the_run_as_the_infrastructures(
    server: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's own case: ``cannot set up the navigation policy: Page.enable: Target crashed``, which
    ended the task as its own error. ``webagent run``'s code path: result.json says it, exit 1 (not 2)."""
    task = local_tasks["catalog-price"]
    crashed = crash_at_set_up(monkeypatch)
    output = tmp_path / "run"
    result = await run_task(guarded(server), task["url"], task["goal"], output, True, None)
    assert crashed == ["about:blank"]  # the session's first tab, before the start page was opened
    assert result.stop_reason == "error" and result.infrastructure and not result.success
    assert result.message.startswith(SETUP_FAILED + "cannot set up the navigation policy"), result.message
    assert "Target crashed" in result.message and result.steps == 0
    written = result_file(output)
    assert written["infrastructure"] is True and written["stop_reason"] == "error"
    assert exit_status(result, False) == EXIT_FAILED


async def test_a_set_up_crash_of_a_run_that_holds_a_secret_writes_its_result_for_its_owner_only(
    server: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The result a set-up crash writes follows the run's output rule (a secret: 0700 / 0600), as
    every other file of the run does."""
    task = local_tasks["catalog-price"]
    crash_at_set_up(monkeypatch)
    config = guarded(server)
    config.secrets = {"TOKEN": SecretStr("not-on-this-page-4711")}
    output = tmp_path / "run"
    result = await run_task(config, task["url"], task["goal"], output, True, None)
    assert result.infrastructure and result_file(output)["infrastructure"] is True
    assert stat.S_IMODE(output.stat().st_mode) == 0o700
    assert stat.S_IMODE((output / "result.json").stat().st_mode) == 0o600


async def test_a_start_page_whose_renderer_keeps_dying_is_a_crash_not_an_unreachable_site(
    server: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first navigation: each load's renderer dies; past ``MAX_PAGE_CRASHES`` reopenings the run
    ends as the infrastructure's, not with a NavigationError ("check that the site is up")."""
    task = local_tasks["catalog-price"]

    async def crash_first(faults: PageFaults, n: int) -> None:
        await crash_page(faults._state.page)

    hook_before(monkeypatch, PageFaults, "load", crash_first)
    async with Agent(make_config(server)) as agent:
        result = await agent.run(task["url"], task["goal"], output_dir=tmp_path / "run")
    assert result.stop_reason == "error" and result.infrastructure and result.steps == 0
    assert result.message.startswith(SETUP_FAILED + f"the page crashed or closed while opening {task['url']}")
    assert result_file(tmp_path / "run")["infrastructure"] is True
    assert MAX_PAGE_CRASHES == 3


async def test_a_callers_context_closed_before_the_run_opens_its_tab_is_the_infrastructures(
    server: FakeModelServer, local_tasks: dict[str, Any], browser: Browser
) -> None:
    """Opening the session: in a caller's context (a raw Playwright error before)."""
    task = local_tasks["catalog-price"]
    context = await browser.new_context()
    await context.close()
    async with Agent(make_config(server), browser=browser) as agent:
        result = await agent.run(task["url"], task["goal"], context=context)
    assert result.stop_reason == "error" and result.infrastructure
    assert result.message.startswith(SETUP_FAILED + "cannot open a tab in the caller's context"), result.message


async def test_a_context_opened_on_a_browser_gone_is_a_crash(launch_options: dict[str, Any]) -> None:
    """Opening the context (the pool's ``BrowserSession.create``, context options included): the pool
    then tries another browser; past its tries the run ends as the infrastructure's."""
    from playwright.async_api import async_playwright

    from webagent.browser.launcher import launch_browser

    async with async_playwright() as playwright:
        gone = await launch_browser(playwright, BrowserConfig(), options=launch_options)
        await gone.close()
        with pytest.raises(BrowserCrashError, match="cannot open a browser context") as raised:
            await BrowserSession.create(gone, BrowserConfig(), options={"locale": "de-DE"})
    assert raised.value.infrastructure


# -- the steps and the final screenshot -------------------------------------------------------------


async def test_a_page_whose_renderer_keeps_dying_ends_the_run_as_the_infrastructures(
    server: FakeModelServer, local_tasks: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step's screenshot: from step 2 on its renderer dies before every screenshot; each is
    reopened until ``MAX_PAGE_CRASHES``, then the run ends with a crash (a plain error before)."""
    task = local_tasks["longpage-code"]

    async def crash_from_step_2(session: BrowserSession, n: int) -> None:
        if n >= 2:
            await crash_page(session.page)

    hook_before(monkeypatch, BrowserSession, "screenshot", crash_from_step_2)
    async with Agent(make_config(server)) as agent:
        result = await agent.run(task["url"], task["goal"])
    assert result.stop_reason == "error" and result.infrastructure
    assert result.message.startswith(f"the page crashed {MAX_PAGE_CRASHES + 1} times"), result.message
    assert result.steps == MAX_PAGE_CRASHES + 2


async def test_a_context_closed_under_an_action_ends_the_run_as_the_infrastructures(
    server: FakeModelServer, local_tasks: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's action (the click of step 2) on a page whose context closed under it."""
    task = local_tasks["catalog-price"]

    async def close_context(session: BrowserSession, n: int) -> None:
        await session.context.close()

    hook_before(monkeypatch, BrowserSession, "click", close_context)
    async with Agent(make_config(server)) as agent:
        result = await agent.run(task["url"], task["goal"])
    assert result.stop_reason == "error" and result.infrastructure and result.steps == 2
    assert result.message.startswith("the browser page is gone"), result.message


async def test_a_renderer_crash_at_the_final_screenshot_of_a_callers_page_is_the_infrastructures(
    server: FakeModelServer, local_tasks: dict[str, Any], browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final step's screenshot, on a page the session does not own (``Pilot.act``, an MCP session's
    ``act``): it cannot be reopened behind the caller's back, so the run ends, as a crash."""
    task = local_tasks["catalog-price"]
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = await context.new_page()

        async def crash_at_final(session: BrowserSession, n: int) -> None:
            if n == 2:
                await crash_page(session.page)

        hook_before(monkeypatch, BrowserSession, "screenshot", crash_at_final)
        config = make_config(server)
        async with Agent(config) as agent:
            settings = config.agent.model_copy(update={"max_steps": 2})  # step 2 is the final one
            result = await agent.run(task["url"], task["goal"], page=page, settings=settings)
        assert result.stop_reason == "error" and result.infrastructure and result.steps == 2
        assert result.message.startswith("the page crashed (its renderer process died)"), result.message
    finally:
        await context.close()


async def test_a_renderer_crash_at_the_validators_screenshot_is_a_crash(
    server: FakeModelServer, local_tasks: dict[str, Any], browser: Browser
) -> None:
    """``Pilot.check`` (the screenshot at the validator's size, what MCP's ``check`` answers from) and
    ``Pilot.screenshot``."""
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = await context.new_page()
        await page.goto(local_tasks["catalog-price"]["url"])
        async with Agent(make_config(server)) as agent:
            pilot = agent.pilot(page)
            await crash_page(page)
            with pytest.raises(BrowserCrashError, match="the page crashed") as raised:
                await pilot.check("the catalog's search box is shown")
            with pytest.raises(BrowserCrashError, match="cannot take a screenshot of the page"):
                await pilot.screenshot()  # (MCP's screenshot tool)
        assert raised.value.infrastructure
    finally:
        await context.close()


# -- after the episode: saving the state, the trace, closing ------------------------------------------


async def test_a_context_gone_while_the_signed_in_state_is_saved_is_the_infrastructures(
    server: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``webagent auth save``: the run succeeded, then its context closed as its state was read."""
    task = local_tasks["catalog-price"]
    save = webagent.record.state.save_storage_state

    async def close_then_save(context: Any, path: Path, *, timeout_s: float) -> Path:
        await context.close()
        return await save(context, path, timeout_s=timeout_s)

    monkeypatch.setattr(webagent.record.state, "save_storage_state", close_then_save)
    state = tmp_path / "state.json"
    async with Agent(make_config(server)) as agent:
        result = await agent.run(task["url"], task["goal"], output_dir=tmp_path / "run", save_state=state)
    assert not result.success and result.stop_reason == "error" and result.infrastructure
    assert result.message.startswith("signed in, but the browser state could not be saved"), result.message
    assert result_file(tmp_path / "run")["infrastructure"] is True
    assert not state.exists()


async def test_a_renderer_crash_as_the_trace_is_stopped_and_the_context_closed_keeps_the_result(
    server: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Playwright trace's stop and closing the context: the episode has ended, its verdict stands."""
    task = local_tasks["catalog-price"]
    stop = TraceSink._stop

    async def crash_then_stop(sink: TraceSink, session: BrowserSession, path: Path | None) -> Path | None:
        await crash_page(session.page)
        return await stop(sink, session, path)

    monkeypatch.setattr(TraceSink, "_stop", crash_then_stop)
    async with Agent(make_config(server)) as agent:
        result = await agent.run(task["url"], task["goal"], output_dir=tmp_path / "run", trace="always")
    assert result.success and result.stop_reason == "answered" and not result.infrastructure
    assert result_file(tmp_path / "run")["success"] is True


async def test_a_browser_gone_as_the_session_closes_keeps_the_result(
    server: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = local_tasks["catalog-price"]

    async def close_browser(session: BrowserSession, n: int) -> None:
        browser = session.context.browser
        assert browser is not None
        await browser.close()

    hook_before(monkeypatch, BrowserSession, "close", close_browser)
    async with Agent(make_config(server)) as agent:
        result = await agent.run(task["url"], task["goal"], output_dir=tmp_path / "run")
    assert result.success and result.stop_reason == "answered"
    assert result_file(tmp_path / "run")["success"] is True
