"""The browser failing while an episode is set up is the infrastructure's (issue 43): ``WebEnv.reset``
sets the episode up again on a fresh context, then raises a ``BrowserCrashError`` (``infrastructure``),
never a verdict and never the client's error; the OpenEnv server answers it as the environment's
failure (a 503, ``/state``'s ``failure``). Real Chromium, real renderer crashes (``Page.crash``)."""

from __future__ import annotations

import httpx
import pytest
from playwright.async_api import Browser

from webagent import Agent, WebEnv
from webagent.env.clock import PageClock
from webagent.env.core import SETUP_RERUNS
from webagent.env.gym import miniwob_config
from webagent.env.openenv import EnvironmentFailure, WebagentEnvironment, build_app
from webagent.errors import BrowserCrashError

from ..browser.crashing import crash_at_set_up, hook_before

pytestmark = pytest.mark.browser

TASK = "miniwob/click-test"


async def test_a_renderer_crash_while_the_guard_is_installed_is_set_up_again(
    own_browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed = crash_at_set_up(monkeypatch, times=1)
    async with (
        Agent(miniwob_config(), browser=own_browser, require=()) as agent,
        WebEnv(agent=agent, reward="task") as env,
    ):
        obs, info = await env.reset(TASK, seed=3)
        assert crashed == ["about:blank"] and info["setup_reruns"] == 1
        assert obs.goal == "Click the button." and obs.url.endswith("/miniwob/click-test.html")
        obs, reward, terminated, truncated, _ = await env.step({"action": "scroll", "direction": "down"})
        assert not (terminated or truncated) and reward == 0.0  # the episode runs as any other
        _, info = await env.reset(TASK, seed=3)
        assert info["setup_reruns"] == 0


async def test_a_set_up_that_keeps_crashing_is_raised_as_the_infrastructure_s(
    own_browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed = crash_at_set_up(monkeypatch, times=SETUP_RERUNS + 1)
    async with (
        Agent(miniwob_config(), browser=own_browser, require=()) as agent,
        WebEnv(agent=agent, reward="task") as env,
    ):
        with pytest.raises(BrowserCrashError, match="Target crashed") as raised:
            await env.reset(TASK, seed=3)
        assert raised.value.infrastructure and len(crashed) == SETUP_RERUNS + 1
        assert env.done and env.result is None and agent.browsers.open_sessions == 0  # no episode, no context
        obs, info = await env.reset(TASK, seed=3)  # the crashes over: the next reset plays
        assert obs.goal and info["setup_reruns"] == 0


async def test_a_context_closed_under_the_page_clock_is_a_crash_too(
    own_browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seeded clock's own set-up: a context gone is a BrowserCrashError (a plain BrowserError, not
    the infrastructure's, before), set up again."""

    async def close_first(clock: PageClock, n: int) -> None:
        if n == 1:
            await clock.context.close()

    hook_before(monkeypatch, PageClock, "install", close_first)
    async with (
        Agent(miniwob_config(), browser=own_browser, require=()) as agent,
        WebEnv(agent=agent, reward="task") as env,
    ):
        obs, info = await env.reset(TASK, seed=5)
        assert info["setup_reruns"] == 1 and obs.goal == "Click the button."


async def test_the_openenv_server_answers_it_as_the_environment_s_failure(
    own_browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_at_set_up(monkeypatch, times=2 * (SETUP_RERUNS + 1))
    async with Agent(miniwob_config(), browser=own_browser, require=()) as agent:
        session = WebagentEnvironment(agent, reward="task")
        try:
            with pytest.raises(EnvironmentFailure, match=r"the environment failed \(setup\): .*Target crashed"):
                await session.reset_async(task=TASK, seed=3)
            assert session.state.done and session.state.failure and "Target crashed" in session.state.failure
        finally:
            await session.env.aclose()
        # Over plain HTTP (openenv-core's route, an environment per request): a 503 of one line, not a 400.
        app = build_app(miniwob_config(), agent=agent, reward="task")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
            reply = await http.post("/reset", json={"task": TASK, "seed": 3})
        detail = reply.json()["detail"]
        assert reply.status_code == 503 and "the environment failed (setup)" in detail and "\n" not in detail
