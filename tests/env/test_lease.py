"""Session leases: a fresh context per episode (nothing leaks), closed when idle or abandoned, and a
browser killed under running episodes ends each of them truncated with its cause, never with a reward."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.async_api import Browser

from webagent import Agent, AgentConfig
from webagent.env import WebEnv, shared_agent
from webagent.testing.miniwob import PLAN

from ..procs import alive, chromium_mains, cmdline, descendants
from .test_miniwob import play

pytestmark = pytest.mark.browser

PAGE = """<!doctype html><title>state</title><p>a page that keeps state</p>"""
WORKER = "self.addEventListener('fetch', () => {});"
KEEP = """async () => {
  document.cookie = 'kept=1; max-age=3600';
  localStorage.setItem('kept', '1');
  sessionStorage.setItem('kept', '1');
  await caches.open('kept');
  await navigator.serviceWorker.register('/sw.js');
  await navigator.serviceWorker.ready;
  return (await navigator.serviceWorker.getRegistrations()).length;
}"""
LEFT = """async () => ({
  cookie: document.cookie, local: localStorage.length, session: sessionStorage.length,
  caches: (await caches.keys()).length, workers: (await navigator.serviceWorker.getRegistrations()).length,
})"""


@pytest.fixture
def state_site(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "index.html").write_text(PAGE)
    (tmp_path / "sw.js").write_text(WORKER)

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(tmp_path), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/index.html"
    finally:
        server.shutdown()
        server.server_close()


async def until(predicate: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def test_nothing_an_episode_stored_reaches_the_next(browser: Browser, state_site: str) -> None:
    task = {"url": state_site, "goal": "look at the page"}
    async with (
        Agent(AgentConfig(), browser=browser, require=()) as agent,
        WebEnv(agent=agent, reward="reference") as env,
    ):
        task["reference"] = ["anything"]
        await env.reset(task)
        assert env.session is not None
        assert await env.session.page.evaluate(KEEP) == 1  # a service worker, cookies, storage, a cache
        first = env.session.context
        await env.reset(task)
        assert env.session is not None and env.session.context is not first
        left = await env.session.page.evaluate(LEFT)
        assert left == {"cookie": "", "local": 0, "session": 0, "caches": 0, "workers": 0}
        assert agent.browsers.open_sessions == 1  # the first episode's context is closed


async def test_an_idle_episode_is_closed_and_its_next_step_says_why(browser: Browser) -> None:
    async with Agent(AgentConfig(), browser=browser, require=()) as agent:
        env = WebEnv(agent=agent, reward="task", idle_timeout_s=0.5)
        obs, _ = await env.reset("miniwob/click-test", seed=1)
        lease = env.lease
        assert lease is not None and agent.browsers.open_sessions == 1
        await until(lambda: lease.closed, 30, "the idle lease to close")
        await until(lambda: agent.browsers.open_sessions == 0, 30, "its context to close")
        last, reward, terminated, truncated, info = await env.step({"action": "scroll", "direction": "down"})
        assert (reward, terminated, truncated) == (0.0, False, True) and last is obs
        assert info["truncated_by"] == "session" and "without a call" in info["failure"]
        assert info["result"].stop_reason == "error" and env.done
        # A lease in use is never reaped, and the environment starts again as usual.
        await env.reset("miniwob/click-test", seed=1)
        assert env.lease is not None and not env.lease.closed
        await env.aclose()


async def test_an_environment_dropped_mid_episode_closes_its_context(browser: Browser) -> None:
    async def start_and_walk_away(agent: Agent) -> None:
        # (In its own frame: a frame's locals snapshot, which Playwright's stack capture makes, would keep it.)
        env = WebEnv(agent=agent, reward="task")
        await env.reset("miniwob/click-test", seed=1)

    async with Agent(AgentConfig(), browser=browser, require=()) as agent:
        await start_and_walk_away(agent)
        assert agent.browsers.open_sessions == 1
        gc.collect()
        await until(lambda: agent.browsers.open_sessions == 0, 30, "the dropped environment's context to close")


async def test_a_browser_killed_under_running_episodes_truncates_each_with_its_cause() -> None:
    me = os.getpid()
    before = chromium_mains(me)
    agent = shared_agent(AgentConfig(), reward="task")
    envs = [WebEnv(agent=agent, reward="task") for _ in range(4)]
    helpers: list[tuple[int, list[str]]] = []
    try:
        await asyncio.gather(*(env.reset("miniwob/click-button", seed=i) for i, env in enumerate(envs)))
        (pid,) = chromium_mains(me) - before
        helpers = [(p, cmdline(p)) for p in descendants(pid)]
        os.kill(pid, signal.SIGKILL)
        results = await asyncio.gather(*(env.step({"action": "scroll", "direction": "down"}) for env in envs))
        for _, reward, terminated, truncated, info in results:
            assert (reward, terminated, truncated) == (0.0, False, True), info
            assert info["truncated_by"] == "error" and info["failure"], info
            assert info["result"].stop_reason == "error" and info["result"].reward is None
        assert all(env.done for env in envs)
        # The next reset gets a new browser, and its episode runs to its reward.
        await envs[0].reset("miniwob/click-button", seed=1)
        reward, terminated, truncated, _, _ = await play(envs[0], PLAN)
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert agent.browsers.launched == 2
    finally:
        for env in envs:
            await env.aclose()
        await agent.aclose()
        for p, args in helpers:
            if alive(p) and cmdline(p) == args:
                os.kill(p, signal.SIGKILL)
