"""The library API: stream, run, run_sync, and callers' own Playwright objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent import Agent, InputError, Phase, Step
from webagent.testing.server import FakeModelServer

from ..conftest import ServerFactory, load_task_script, make_config

pytestmark = pytest.mark.e2e


async def test_stream_yields_typed_steps_and_sets_result(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script("catalog-price")) as server:
        agent = Agent(make_config(server), browser=browser)
        stream = agent.stream(task["url"], task["goal"])
        assert stream.result is None
        steps: list[Step] = []
        async for step in stream:
            assert isinstance(step, Step)
            assert step.image is not None  # the screenshot travels with the step while it is fresh
            steps.append(step)
        await agent.aclose()
    assert stream.result is not None and stream.result.success
    assert [s.index for s in steps] == [1, 2, 3]
    assert browser.is_connected()  # a browser passed in is not closed by the agent


async def test_events_say_what_a_run_does_before_its_first_step(
    model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script("catalog-price")) as server, Agent(make_config(server)) as agent:
        for launch in (["launch"], []):  # the second run finds the browser up
            stream = agent.stream(task["url"], task["goal"])
            events = [event async for event in stream.events()]
            phases = [e for e in events if isinstance(e, Phase)]
            assert [p.name for p in phases] == [*launch, "open", "step"]
            assert all(p.url == task["url"] for p in phases)
            assert events[: len(phases)] == phases  # all before the first step
            assert [e.index for e in events if isinstance(e, Step)] == [1, 2, 3]
            assert stream.result is not None and stream.result.success


async def test_a_stream_closed_early_has_its_result_and_files_at_once(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script("catalog-price")) as server:
        agent = Agent(make_config(server), browser=browser)
        stream = agent.stream(task["url"], task["goal"], output_dir=tmp_path / "run")
        async for _ in stream:
            break
        await stream.aclose()
        assert stream.result is not None and stream.result.message == "the run was interrupted"
        assert (tmp_path / "run" / "result.json").exists()
        await agent.aclose()


async def test_callers_page_is_driven_and_left_open(
    browser: Browser, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    task = local_tasks["catalog-price"]
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await context.new_page()
    async with model_server(load_task_script("catalog-price")) as server, Agent(make_config(server)) as agent:
        result = await agent.run(task["url"], task["goal"], page=page)
    assert result.success
    assert not page.is_closed() and "/catalog/product/" in page.url
    # and with a context: the agent opens its own page in it
    async with model_server(load_task_script("catalog-price")) as server, Agent(make_config(server)) as agent:
        result = await agent.run(task["url"], task["goal"], context=context)
    assert result.success and len(context.pages) == 1  # the page the agent opened is closed again
    await context.close()


def test_run_sync(site: Any, local_tasks: dict[str, Any]) -> None:
    server = FakeModelServer(load_task_script("catalog-price"))
    server.start_in_thread()
    try:
        task = local_tasks["catalog-price"]
        result = Agent(make_config(server)).run_sync(task["url"], task["goal"])
    finally:
        server.stop_thread()
    assert result.success and result.answer == "$12.50"


def test_bad_goal_is_an_input_error(site: Any) -> None:
    server = FakeModelServer(load_task_script("catalog-price"))
    server.start_in_thread()
    try:
        with pytest.raises(InputError, match="no goal given"):
            Agent(make_config(server)).stream(site.url, "  ")
    finally:
        server.stop_thread()
