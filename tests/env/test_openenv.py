"""OpenEnv: ``webagent env serve`` driven by openenv-core's own clients, several at once on one browser
pool; a client that walks away mid-episode has its context closed; a killed browser is an error, never a reward."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient
from playwright.async_api import Browser

from webagent.env.openenv import WebAction, WebagentClient
from webagent.testing.miniwob import env_action

from ..procs import alive, chromium_mains, cmdline, descendants
from .helpers import at_image, plan_for
from .server import VIEWPORT, serve, status

pytestmark = pytest.mark.browser


async def until_status(url: str, key: str, value: int, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while (got := (await status(url))[key]) != value:
        assert time.monotonic() < deadline, f"{key} stayed {got}, not {value}"
        await asyncio.sleep(0.2)


async def solve(url: str, browser: Browser, name: str, seed: int) -> float | None:
    planned = await plan_for(browser, name, seed, VIEWPORT)  # before the episode: the client's thinking is not idling
    async with WebagentClient(base_url=url) as client:
        result = await client.reset(task=name, seed=seed)
        obs = result.observation
        assert obs.goal and obs.screenshot.startswith("data:image/") and not result.done
        for action in planned:
            point = at_image(action, VIEWPORT, obs.image_size)
            result = await client.step(WebAction(action=env_action(action), point=point))
            if result.done:
                break
        state = await client.state()
        assert state.done and state.failure is None and state.task_id == name
        assert result.observation.terminated and not result.observation.truncated
        return result.reward


async def test_served_by_openenv_core_to_its_own_clients_several_at_once(tmp_path: Path, browser: Browser) -> None:
    async with serve(tmp_path, "--idle-timeout", "5") as served:
        url = served.url
        async with httpx.AsyncClient() as http:
            health = (await http.get(f"{url}/health", timeout=30)).json()
            schema = (await http.get(f"{url}/schema", timeout=30)).json()
        assert health["status"] == "healthy"
        assert {"reply", "action", "point"} <= set(schema["action"]["properties"])
        assert {"screenshot", "goal", "truncated_by"} <= set(schema["observation"]["properties"])

        # Four clients at once, each on its own session of the one browser pool.
        names = ["miniwob/click-button", "miniwob/click-link", "miniwob/enter-text", "miniwob/click-checkboxes"]
        rewards = await asyncio.gather(*(solve(url, browser, n, seed) for seed, n in enumerate(names, start=2)))
        assert rewards == [1.0] * 4
        assert (await status(url))["browsers"] == 1

        # The generic client (plain dicts) too; a client that closes mid-episode ends its session.
        generic = GenericEnvClient(base_url=url)
        await generic.connect()
        result = await generic.reset(task="miniwob/click-test", seed=1)
        assert result.observation["goal"] == "Click the button." and result.reward is None
        result = await generic.step({"action": {"action": "scroll", "direction": "down"}})
        assert result.done is False and result.observation["outcome"] == "ok"
        await generic.close()
        await until_status(url, "open_contexts", 0)

        # One that stays connected and silent is cut off by its lease's idle limit.
        silent = WebagentClient(base_url=url)
        await silent.connect()
        await silent.reset(task="miniwob/click-test", seed=1)
        assert (await status(url))["open_contexts"] == 1
        await until_status(url, "open_contexts", 0)
        assert (await status(url))["reaped"] >= 1
        with pytest.raises((RuntimeError, ConnectionError)) as failed:  # no reward: an error
            await silent.step(WebAction(action={"action": "scroll", "direction": "down"}))
        assert "without a call" in str(failed.value) or isinstance(failed.value, ConnectionError)
        with contextlib.suppress(Exception):
            await silent.close()


async def test_a_killed_browser_is_an_error_for_every_running_session_never_a_reward(tmp_path: Path) -> None:
    async with serve(tmp_path) as served:
        proc, url = served.proc, served.url
        clients = [WebagentClient(base_url=url) for _ in range(3)]
        helpers: list[tuple[int, list[str]]] = []
        try:
            for i, client in enumerate(clients):
                await client.connect()
                await client.reset(task="miniwob/click-button", seed=i)
            (pid,) = chromium_mains(proc.pid)
            helpers = [(p, cmdline(p)) for p in descendants(pid)]
            os.kill(pid, signal.SIGKILL)
            for client in clients:
                with pytest.raises(RuntimeError, match=r"the environment failed \(error\)"):
                    await client.step(WebAction(action={"action": "scroll", "direction": "down"}))
                state = await client.state()
                assert state.done and state.failure and state.reward is None and state.truncated_by == "error"
            # The next reset gets a new browser.
            result = await clients[0].reset(task="miniwob/click-test", seed=1)
            assert result.observation.goal == "Click the button."
            assert (await status(url))["crashes"] == 1
        finally:
            for client in clients:
                with contextlib.suppress(Exception):
                    await client.close()
            for p, args in helpers:
                if alive(p) and cmdline(p) == args:
                    os.kill(p, signal.SIGKILL)


def test_a_port_in_use_is_one_line_error(tmp_path: Path) -> None:
    import socket
    import subprocess

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "webagent", "env", "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"webagent: error: cannot listen on 127.0.0.1:{port}: "), lines
