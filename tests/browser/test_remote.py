"""Remote browsers: a second local Chromium over CDP, a Playwright browser server over ws://; reconnecting."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright._impl._driver import compute_driver_executable

from webagent import Agent, BrowserError, ConfigError
from webagent.browser.devtools import free_port
from webagent.browser.launcher import CHROMIUM_ARGS
from webagent.config import load_config

from ..conftest import ServerFactory, load_task_script, make_config

pytestmark = pytest.mark.browser


@contextlib.contextmanager
def process(args: list[str], ready: str, stream: str = "stderr") -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Start ``args`` in its own process group; yield it and its first output line matching ``ready``."""
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE if stream == "stdout" else subprocess.DEVNULL,
        stderr=subprocess.PIPE if stream == "stderr" else subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        pipe = proc.stdout if stream == "stdout" else proc.stderr
        assert pipe is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = pipe.readline()
            if m := re.search(ready, line):
                break
            if not line and proc.poll() is not None:
                raise RuntimeError(f"{args[0]} exited with {proc.returncode}")
        else:
            raise RuntimeError(f"{args[0]} did not print {ready!r}")
        yield proc, m.group(1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def remote_chromium(port: int, profile: Path) -> contextlib.AbstractContextManager[tuple[subprocess.Popen[str], str]]:
    args = ["/usr/bin/chromium", "--headless", *CHROMIUM_ARGS, f"--remote-debugging-port={port}"]
    return process([*args, f"--user-data-dir={profile}", "about:blank"], r"DevTools listening on (ws://\S+)")


def remote_config(server: Any, **browser: Any) -> Any:
    config = make_config(server)
    for key, value in browser.items():
        setattr(config.browser, key, value)
    return config


async def test_cdp_endpoint_runs_tasks_and_reconnects_after_the_browser_restarts(
    model_server: ServerFactory, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    task = local_tasks["catalog-price"]
    port = free_port()
    async with model_server(load_task_script("catalog-price")) as server:
        agent = Agent(remote_config(server, cdp_endpoint=f"http://127.0.0.1:{port}"))
        try:
            with remote_chromium(port, tmp_path / "a") as (_, ws_url):
                assert ws_url.startswith(f"ws://127.0.0.1:{port}/devtools/browser/")
                assert (await agent.run(task["url"], task["goal"])).success
                assert agent.browsers.launched == 1
            # The remote browser went away and came back on the same address: the pool reconnects.
            with remote_chromium(port, tmp_path / "b"):
                assert (await agent.run(task["url"], task["goal"])).success
                assert agent.browsers.launched == 2 and agent.browsers.crashes == 1
        finally:
            await agent.aclose()


async def test_ws_endpoint_on_a_playwright_browser_server(
    model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    node, cli = compute_driver_executable()
    port = free_port()
    # --unsafe lets the client choose the browser binary (the bundled one is not installed here).
    server_args = [node, cli, "run-server", "--host", "127.0.0.1", "--port", str(port), "--unsafe"]
    with process(server_args, r"Listening on (ws://\S+)", stream="stdout") as (_, endpoint):
        task = local_tasks["catalog-price"]
        async with model_server(load_task_script("catalog-price")) as server:
            config = remote_config(server, ws_endpoint=endpoint, executable_path="/usr/bin/chromium", recycle_after=1)
            async with Agent(config) as agent:
                for _ in range(2):
                    assert (await agent.run(task["url"], task["goal"])).success
                # recycle_after=1: each session got a new connection (a fresh browser on the server).
                assert agent.browsers.launched == 2 and agent.browsers.crashes == 0


async def test_unreachable_remote_browser_is_a_clear_error(
    model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    task = local_tasks["catalog-price"]
    async with model_server(load_task_script("catalog-price")) as server:
        config = remote_config(server, cdp_endpoint=endpoint, navigation_timeout_s=5)
        async with Agent(config) as agent:
            with pytest.raises(BrowserError, match=f"cannot connect to the remote browser at {endpoint}"):
                await agent.run(task["url"], task["goal"])


def test_remote_endpoint_settings_are_checked() -> None:
    config = load_config(env={"WEBAGENT_BROWSER_CDP_ENDPOINT": "http://10.0.0.5:9222"})
    assert config.browser.remote == "http://10.0.0.5:9222"
    with pytest.raises(ConfigError, match="not both"):
        load_config(env={}, overrides={"browser.ws_endpoint": "ws://a:1/", "browser.cdp_endpoint": "http://a:2"})
    with pytest.raises(ConfigError, match=r"ws_endpoint.*ws://"):
        load_config(env={}, overrides={"browser.ws_endpoint": "localhost:3000"})
