"""Issue 45's floor: one task means the same everywhere.

A ``TaskSpec`` with ``max_steps: 2``, an ``expect``, a saved sign-in (``storage_state``) and a
``locale`` runs through ``webagent batch``, ``webagent test``, ``WebEnv.reset`` and its gymnasium
adapter (given as a ``TaskSpec`` or as a task file's line), the OpenEnv server (a client's task dict,
its saved sign-in refused), and the MCP server's ``run_task``, in real Chromium against the offline models and a local
page that shows the cookie and ``navigator.language``. Each run sees the cookie and the locale, stops
at its second step (the config allows five) and has its answer judged with the expectation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from playwright.async_api import Browser

from webagent import Agent
from webagent.env import WebEnv
from webagent.env.gym import AsyncWebGymEnv
from webagent.env.openenv import WebAction, WebagentClient
from webagent.mcp_server import WebagentMCP
from webagent.testing.server import FakeModelServer

from ..conftest import ServerFactory, make_config
from ..env.server import serve
from ..mcp_server.conftest import mcp_env, role_flags
from .floor import (
    CONFIG_MAX_STEPS,
    COOKIE,
    EXPECT,
    GOAL,
    LOCALE,
    MAX_STEPS,
    SEEN,
    expect_judged,
    floor_site,
    floor_task,
    script,
    task_line,
    write_state,
)

pytestmark = pytest.mark.e2e

ANSWER = {"action": {"action": "answer", "content": "signed in, in French"}}
SCROLL = {"action": {"action": "scroll", "direction": "down"}}


@pytest.mark.parametrize("shape", ["TaskSpec", "dict"])
async def test_webenv_reset_runs_the_task_it_is_given(
    shape: str, browser: Browser, model_server: ServerFactory, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state.json")
    with floor_site() as site:
        async with model_server(script()) as server:
            agent = Agent(make_config(server, max_steps=CONFIG_MAX_STEPS), browser=browser)
            env = WebEnv(agent=agent)
            task = floor_task(site, state) if shape == "TaskSpec" else task_line(site, state)  # a task file's line
            try:
                obs, _ = await env.reset(task)
                assert SEEN in obs.url and not obs.final  # the page saw the cookie and the locale
                assert env.session is not None
                page = env.session.page
                assert await page.evaluate("navigator.language") == LOCALE
                assert f"{COOKIE[0]}={COOKIE[1]}" in await page.evaluate("document.cookie")
                obs, *_ = await env.step(SCROLL)
                assert obs.final and obs.step == MAX_STEPS  # the task's limit, not the config's
                _, reward, terminated, truncated, info = await env.step(ANSWER)
                assert (reward, terminated, truncated) == (1.0, True, False)
                assert info["result"].steps == MAX_STEPS and info["result"].success
            finally:
                await env.aclose()
                await agent.aclose()
            assert expect_judged(server)
    assert site.starts() == [(True, LOCALE)]


async def test_the_gymnasium_adapter_runs_the_task_it_is_given(
    browser: Browser, model_server: ServerFactory, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state.json")
    with floor_site() as site:
        async with model_server(script()) as server:
            agent = Agent(make_config(server, max_steps=CONFIG_MAX_STEPS), browser=browser)
            env = AsyncWebGymEnv(floor_task(site, state), agent=agent, reward="validator")
            try:
                obs, _ = await env.reset(seed=3)
                assert SEEN in obs["url"]
                await env.step({"kind": "scroll", "text": "down"})
                assert env.last is not None and env.last.final
                _, reward, terminated, truncated, info = await env.step({"kind": "answer", "text": "signed in"})
                assert (reward, terminated, truncated) == (1.0, True, False)
                assert info["success"] and env.last_info["result"].steps == MAX_STEPS
            finally:
                await env.close()
                await agent.aclose()
            assert expect_judged(server)
    assert site.starts() == [(True, LOCALE)]


async def test_the_mcp_server_runs_the_task_it_is_given(
    browser: Browser, model_server: ServerFactory, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    write_state(profiles / "floor.json")  # the saved sign-in, the operator's: a profile of the server
    with floor_site() as site:
        async with model_server(script()) as server:
            config = make_config(server, max_steps=CONFIG_MAX_STEPS)
            config.browser.private_network = "allow"  # a client's local start
            app = WebagentMCP(config, output_dir=tmp_path / "runs", browser=browser, profile_dir=profiles)
            try:
                async with Client(app.server) as client:
                    arguments = {"url": f"{site.url}/start", "goal": GOAL, "max_steps": MAX_STEPS, "expect": EXPECT}
                    arguments |= {"browser": {"locale": LOCALE}, "profile": "floor"}
                    result = await client.call_tool("run_task", arguments)
            finally:
                await app.aclose()
            assert expect_judged(server)
    assert not result.is_error, result.content
    data = result.structured_content
    assert data is not None and data["success"] and data["steps"] == MAX_STEPS, data
    assert SEEN in data["final_url"]
    assert site.starts() == [(True, LOCALE)]


async def test_the_openenv_server_runs_a_client_s_task_with_its_options(
    model_server: ServerFactory, tmp_path: Path
) -> None:
    """Through openenv-core's own client: a client's task dict carries its options and session
    settings (a locale), and may not name what only the operator may (a saved sign-in)."""
    with floor_site() as site:
        async with model_server(script()) as server:
            allow = f"127.0.0.1:{site.url.rsplit(':', 1)[1]}"  # the operator opens the floor page to clients
            flags = ["--reward", "validator", "--max-steps", str(CONFIG_MAX_STEPS), "--allow-domain", allow]
            async with (
                serve(tmp_path, *flags, *role_flags(server.url)) as served,
                WebagentClient(base_url=served.url) as client,
            ):
                line = task_line(site, write_state(tmp_path / "state.json"))
                with pytest.raises(
                    RuntimeError, match=r"browser\.storage_state: refused from a client.*operator's own tasks may"
                ):
                    await client.reset(task=line)
                with pytest.raises(RuntimeError, match=r"trace cannot be honoured here"):
                    await client.reset(task={**line, "browser": {"locale": LOCALE}, "trace": "always"})
                result = await client.reset(task={**line, "browser": {"locale": LOCALE}})
                assert f"lang={LOCALE}" in result.observation.url and not result.observation.final
                result = await client.step(WebAction(action=SCROLL["action"]))
                assert result.observation.final and result.observation.step == MAX_STEPS  # the task's limit
                result = await client.step(WebAction(action=ANSWER["action"]))
                assert result.done  # judged with the expectation; not signed in, so not accepted
            assert expect_judged(server)
    assert site.starts() == [(False, LOCALE)]


def _webagent(server: FakeModelServer, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "webagent", *args, "--max-steps", str(CONFIG_MAX_STEPS), *role_flags(server.url)]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=mcp_env())


def _line(out: Path) -> dict[str, Any]:
    lines = (out / "results.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1
    line: dict[str, Any] = json.loads(lines[0])
    return line


@pytest.mark.parametrize("command", ["batch", "test"])
def test_webagent_batch_and_test_run_the_task_they_are_given(command: str, tmp_path: Path) -> None:
    state = write_state(tmp_path / "state.json")
    server = FakeModelServer(script())
    server.start_in_thread()
    try:
        with floor_site() as site:
            line = task_line(site, state)
            if command == "batch":
                source = tmp_path / "tasks.jsonl"
                source.write_text(json.dumps(line) + "\n", encoding="utf-8")
            else:  # a suite's check: the same keys, named instead of an id
                source = tmp_path / "suite.yaml"
                check = {"name": line.pop("id"), **line}
                source.write_text(json.dumps({"checks": [check]}), encoding="utf-8")
            out = tmp_path / "out"
            proc = _webagent(server, command, str(source), "--output", str(out), "--trust-tasks")
            starts = site.starts()
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = _line(out)
        assert result["success"] and result["steps"] == MAX_STEPS, result
        assert expect_judged(server)
        assert starts == [(True, LOCALE)]
    finally:
        server.stop_thread()
