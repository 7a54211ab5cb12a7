"""Remote browsers: a second local Chromium over CDP, a Playwright browser server over ws://; reconnecting."""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright._impl._driver import compute_driver_executable
from playwright.async_api import async_playwright

from webagent import Agent, BrowserError, ConfigError
from webagent.browser.devtools import free_port
from webagent.browser.launcher import CHROMIUM_ARGS, connect_browser
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig, load_config
from webagent.files.downloads import DownloadFolder
from webagent.testing.downloadsite import FILE_BYTE, LINK, file_path
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory, load_task_script, make_config

pytestmark = pytest.mark.browser


@contextlib.contextmanager
def process(args: list[str], ready: str, stream: str = "stderr") -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Start ``args`` in its own process group; yield it and its first output line matching ``ready``.

    The output is read on a thread so the deadline holds even when the process prints nothing; what it
    printed is in the error when the line never comes (a loaded machine or a taken port shows there).
    """
    proc = subprocess.Popen(
        args,
        stdout=subprocess.PIPE if stream == "stdout" else subprocess.DEVNULL,
        stderr=subprocess.PIPE if stream == "stderr" else subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    pipe = proc.stdout if stream == "stdout" else proc.stderr
    assert pipe is not None

    def read() -> None:
        for line in pipe:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 90
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                if proc.poll() is not None and lines.empty():
                    raise RuntimeError(f"{args[0]} exited with {proc.returncode}: {''.join(seen[-20:])}") from None
                continue
            seen.append(line)
            if m := re.search(ready, line):
                break
        else:
            raise RuntimeError(f"{args[0]} did not print {ready!r} within 90 s; it printed: {''.join(seen[-20:])}")
        yield proc, m.group(1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def remote_chromium(port: int, profile: Path) -> contextlib.AbstractContextManager[tuple[subprocess.Popen[str], str]]:
    """A Chromium serving CDP on ``port`` (0: one it picks, read back from the ws:// address it prints)."""
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
    async with model_server(load_task_script("catalog-price")) as server:
        agent: Agent | None = None
        try:
            # Port 0: Chromium takes a port itself, so nothing started meanwhile can hold the one it was given.
            with remote_chromium(0, tmp_path / "a") as (_, ws_url):
                found = re.match(r"ws://127\.0\.0\.1:(\d+)/devtools/browser/", ws_url)
                assert found, ws_url
                port = int(found.group(1))
                agent = Agent(remote_config(server, cdp_endpoint=f"http://127.0.0.1:{port}"))
                assert (await agent.run(task["url"], task["goal"])).success
                assert agent.browsers.launched == 1
            # The remote browser went away and came back on the same address: the pool reconnects.
            with remote_chromium(port, tmp_path / "b"):
                assert (await agent.run(task["url"], task["goal"])).success
                assert agent.browsers.launched == 2 and agent.browsers.crashes == 1
        finally:
            if agent is not None:
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


async def test_downloads_over_a_playwright_browser_server_come_through_the_driver(
    site: SiteServer, tmp_path: Path
) -> None:
    """The browser's files are on its machine: a kept download is streamed through Playwright's
    connection (``save_as``), and the size limit still holds, from the browser's progress events."""
    node, cli = compute_driver_executable()
    port = free_port()
    server_args = [node, cli, "run-server", "--host", "127.0.0.1", "--port", str(port), "--unsafe"]
    with process(server_args, r"Listening on (ws://\S+)", stream="stdout") as (_, endpoint):
        async with async_playwright() as playwright:
            config = BrowserConfig(ws_endpoint=endpoint, executable_path="/usr/bin/chromium", max_download_mb=1)
            browser = await connect_browser(playwright, config)
            session = await BrowserSession.create(browser, config)
            try:
                session.keep_downloads(DownloadFolder(tmp_path / "downloads"))
                told: list[str] = []
                for name, size in (("small.bin", 1000), ("big.bin", 8 * 1024 * 1024)):
                    await session.goto(f"{site.url}/downloads/link?href={quote(file_path(name, size), safe='')}")
                    await session.click(*LINK)
                    for _ in range(100):
                        told += session.drain_events()
                        if any(name in e and "in progress" not in e for e in told):
                            break
                        await asyncio.sleep(0.1)
            finally:
                await session.close()
                await browser.close()
    assert [e for e in told if "in progress" not in e] == [
        "Downloaded: small.bin (1000 bytes)",
        f"The download of 'big.bin' ({site.url}{file_path('big.bin', 8 * 1024 * 1024)}) was cancelled: it is "
        "larger than 1 MB ([browser] max_download_mb).",
    ]
    assert sorted(p.name for p in (tmp_path / "downloads").iterdir()) == ["small.bin"]
    assert (tmp_path / "downloads" / "small.bin").read_bytes() == FILE_BYTE * 1000
