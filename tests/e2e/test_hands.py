"""The new hands end to end: each /hands/ page done in real Chromium with the offline model, in
webagent's contract and both of H's, grounded and not; without its hand each task fails."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent import Agent, RunResult, Step
from webagent.config import AgentConfig
from webagent.testing.hands import HAND_TASKS, HandTask
from webagent.testing.offline import offline_config
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory

pytestmark = pytest.mark.e2e

#: (policy family, grounding, output): webagent's JSON, H's JSON tool_call, H's native tool calls;
#: clicks placed by the policy itself or by a localizer.
CONTRACTS = [
    (None, "localizer", "json"),
    ("holo1.5", "policy", "json"),
    ("holo3", "policy", "json"),
    ("holo3", "localizer", "json"),
    ("holo3.1", "policy", "tools"),
    ("holo3.1", "localizer", "tools"),
]


def config_for(server: FakeModelServer, family: str | None, grounding: str, output: str, **agent: Any) -> AgentConfig:
    config = offline_config(server.url, "holo1.5", family=family, grounding=grounding, **{"max_steps": 12, **agent})
    config.policy.output = output  # type: ignore[assignment]
    if family in ("holo3", "holo3.1"):  # one model at one server (H's judge in the policy's conversation)
        config.policy.base_url = config.validator.base_url = f"{server.url}/v1"
    for role in ("policy", "localizer", "validator"):
        config.role(role).timeout_s = 10.0
    return config


def events_of(site: SiteServer, task: HandTask) -> list[dict[str, str]]:
    """The page's reports of the real event the task needs (each field as expected)."""
    return [
        e
        for e in site.hand_events
        if all(k in e and (e[k] == v or (k == "types" and v in e[k].split(","))) for k, v in task.event.items())
    ]


async def run_all(
    browser: Browser | None,
    server: FakeModelServer,
    config: AgentConfig,
    site: SiteServer,
    scripts: dict[str, HandTask],
) -> dict[str, tuple[RunResult, list[Step]]]:
    agent = Agent(config, browser=browser)
    try:

        async def one(task: HandTask) -> tuple[RunResult, list[Step]]:
            stream = agent.stream(task.url(site.url), task.goal)
            steps = [step async for step in stream]
            assert stream.result is not None
            return stream.result, steps

        done = await asyncio.gather(*(one(t) for t in scripts.values()))
    finally:
        await agent.aclose()
    return dict(zip(scripts, done, strict=True))


def merged(tasks: dict[str, HandTask], *, without: bool = False) -> dict[str, Any]:
    """One script for every task (each matched by its goal)."""
    scripts = [t.script(t.without if without else None) for t in tasks.values()]
    script = scripts[0]
    for other in scripts[1:]:
        script["elements"].update(other["elements"])
    script["tasks"] = [dict(s["tasks"][0], id=t) for s, t in zip(scripts, tasks, strict=True)]
    return script


@pytest.mark.parametrize(("family", "grounding", "output"), CONTRACTS)
async def test_every_hands_task_is_done_in_each_contract(
    browser: Browser, model_server: ServerFactory, site: SiteServer, family: str | None, grounding: str, output: str
) -> None:
    site.hand_events.clear()
    async with model_server(merged(HAND_TASKS)) as server:
        runs = await run_all(browser, server, config_for(server, family, grounding, output), site, HAND_TASKS)
        localized = server.request_counts.get("localizer", 0)
    outcomes = {name: (r.success, r.message) for name, (r, _) in runs.items()}
    assert all(ok for ok, _ in outcomes.values()), outcomes
    for name, task in HAND_TASKS.items():
        assert events_of(site, task), (name, site.hand_events)
        result, steps = runs[name]
        assert result.answer == task.answer and result.grounding == grounding
        hands = [s for s in steps if s.action is not None and s.action.action == task.hand]
        assert hands and all(s.error is None for s in hands), [(s.action, s.outcome) for s in steps]
    assert (localized == 0) == (grounding == "policy")
    # What each hand changed is told: the card moved, the slider's thumb moved, the panel scrolled
    # and then stopped at its end, the second tab listed.
    board = runs["board-card"][1][0]
    assert board.target_point is not None and "moved into another container" in board.outcome, board.outcome
    assert "it moved by (+" in runs["slider"][1][0].outcome
    panel = [s.outcome for s in runs["log-panel"][1][:5]]
    assert all(o.startswith("ok, scrolled the panel (div) down by") for o in panel[:4]), panel
    assert panel[4] == "the panel (div) did not move: it is at its end (down)"
    tabs = runs["coupon-tab"][1][1].context
    assert tabs is not None and tabs.policy is not None and [t.current for t in tabs.policy.tabs] == [False, True]


async def test_without_its_hand_each_task_fails(
    browser: Browser, model_server: ServerFactory, site: SiteServer
) -> None:
    site.hand_events.clear()
    async with model_server(merged(HAND_TASKS, without=True)) as server:
        runs = await run_all(browser, server, config_for(server, None, "localizer", "json"), site, HAND_TASKS)
    assert not any(r.success for r, _ in runs.values()), {n: r.message for n, (r, _) in runs.items()}
    assert all(not events_of(site, task) for task in HAND_TASKS.values()), site.hand_events


async def test_the_hands_work_in_the_full_chromium_over_playwright_s_own_channel(
    model_server: ServerFactory, site: SiteServer
) -> None:
    """The shared browser is the headless shell with clicks over the direct DevTools connection; here
    the full Chromium, every command through Playwright."""
    site.hand_events.clear()
    async with model_server(merged(HAND_TASKS)) as server:
        config = config_for(server, None, "localizer", "json")
        config.browser.headless_shell, config.browser.direct_cdp = False, False
        runs = await run_all(None, server, config, site, HAND_TASKS)
    assert all(r.success for r, _ in runs.values()), {n: r.message for n, (r, _) in runs.items()}
    assert all(events_of(site, task) for task in HAND_TASKS.values()), site.hand_events
