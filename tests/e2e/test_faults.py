"""The real agent through pages that misbehave and a renderer crash: the run goes on to its answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent import Agent, Step
from webagent.testing.sites import SiteServer
from webagent.testing.trouble import DOWNLOAD_NAME, TRAPS

from ..conftest import ServerFactory, load_task_script, make_config

pytestmark = pytest.mark.e2e

GOAL = "Walk through every trap on the trouble page and answer done"
STEPS: list[dict[str, Any]] = [
    {"action": "click_element", "element": "download link"},
    {"action": "click_element", "element": "file input"},
    {"action": "click_element", "element": "redirect loop link"},
    {"action": "go_back"},
    {"action": "click_element", "element": "never loading link"},
    {"action": "go_back"},
    {"action": "click_element", "element": "guarded page link"},
    {"action": "click_element", "element": "blank area"},  # a user gesture on the guarded page
    {"action": "click_element", "element": "back link"},  # its beforeunload handler is asked
    {"action": "answer", "content": "done"},
]


def trouble_script() -> dict[str, Any]:
    elements = {name: list(point) for name, point in TRAPS.items()}
    elements |= {"blank area": [900, 600], "back link": list(TRAPS["download link"])}
    return {
        "elements": elements,
        "tasks": [
            {
                "id": "trouble",
                "match": GOAL,
                "policy": [{"when": {"step": i}, "action": a} for i, a in enumerate(STEPS, start=1)],
                "validator": {"accept": ["done"], "feedback": "Not done."},
            }
        ],
    }


async def test_every_trap_is_reported_and_the_run_goes_on(
    browser: Browser, model_server: ServerFactory, site: SiteServer
) -> None:
    async with model_server(trouble_script()) as server:
        config = make_config(server)
        # Long enough for the redirect loop to fail within the action's wait on a loaded machine;
        # only the never-loading page waits for all of it.
        config.browser.settle_timeout_s = 3.0
        agent = Agent(config, browser=browser)
        stream = agent.stream(site.url + "/trouble/", GOAL)
        steps = [step async for step in stream]
        await agent.aclose()
    result = stream.result
    assert result is not None and result.success, result and result.message
    assert result.steps == len(STEPS)
    assert all(s.error is None for s in steps), [s.error for s in steps]
    base = site.url + "/trouble"
    # Each step's events tell the policy what the previous action ran into.
    # The download at the click's next observation (or a later one, where the browser announced it
    # after the page settled: a loaded machine), told once.
    told = f"Downloaded: {DOWNLOAD_NAME} (1472 bytes)"
    at = [s.index for s in steps if told in s.events]
    assert len(at) == 1 and at[0] >= 2, at
    downloads = [e for s in steps for e in s.events if "download" in e.lower()]
    assert [e for e in downloads if e != told and "is in progress" not in e] == []
    events = {s.index: [e for e in s.events if "download" not in e.lower()] for s in steps}
    # A run without an output folder kept it in a private temporary one, removed with the agent.
    [kept] = result.downloads
    assert (kept.name, kept.bytes, kept.url) == (DOWNLOAD_NAME, 1472, f"{base}/download.bin")
    assert Path(kept.path).name == DOWNLOAD_NAME and not Path(kept.path).parent.exists()
    assert events[3] == ["A file chooser opened and was dismissed; to upload an allowed file, use upload_file."]
    assert events[4] == [f"Opening {base}/loop failed: net::ERR_TOO_MANY_REDIRECTS."]
    assert steps[3].url == "chrome-error://chromewebdata/"
    assert events[6] == ["The page was still loading after 3 s."]
    assert steps[5].url == base + "/never-loads"
    assert events[10] == ["A JavaScript beforeunload dialog appeared (it was accepted)."]
    assert steps[9].url == base + "/"
    assert not [e for i, e in events.items() if e and i not in (2, 3, 4, 6, 10)]


async def test_a_renderer_crash_mid_run_is_recovered(
    own_browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script("catalog-price")) as server:
        agent = Agent(make_config(server), browser=own_browser)
        stream = agent.stream(task["url"], task["goal"])
        steps: list[Step] = []
        async for step in stream:
            steps.append(step)
            if step.index == 1:  # now on the search results: crash the renderer under the run
                assert stream.session is not None
                page = stream.session.page
                cdp = await stream.session.context.new_cdp_session(page)
                crashed = asyncio.ensure_future(page.wait_for_event("crash"))
                sent = asyncio.ensure_future(cdp.send("Page.crash"))
                await crashed
                sent.cancel()
                await asyncio.gather(sent, return_exceptions=True)
        await agent.aclose()
    result = stream.result
    assert result is not None and result.success, result and result.message
    assert result.answer == "$12.50" and result.steps == 3
    search_url = steps[1].url
    assert "/catalog/search" in search_url
    assert steps[1].events == [
        f"The page crashed (its renderer process died); the agent reopened {search_url} in a new tab."
    ]
