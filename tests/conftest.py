"""Shared fixtures: the local task sites, one Chromium for the whole run, the offline model server.

The suite runs with pytest-playwright loaded, but its tests are async (pytest-asyncio's session
loop) and pytest-playwright's ``browser``/``context``/``page`` are sync: a sync Playwright in this
process would mark its own event loop as running in the main thread and no async test could run
after it (its asyncio twin, pytest-playwright-asyncio, cannot be loaded beside it). So ``browser``
here is the async counterpart of pytest-playwright's: launched by webagent's own launcher (its
flags and DevTools port, which the browser tests exercise) with pytest-playwright's launch
arguments (``browser_type_launch_args``: ``--headed``, ``--browser-channel``, ``--slowmo``, and what
webagent's pytest plugin adds). Sync pytest-playwright tests (the plugin's) run in subprocesses.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from playwright.async_api import Browser, async_playwright

from webagent.browser.launcher import launch_browser
from webagent.config import AgentConfig, BrowserConfig
from webagent.testing.offline import load_local_tasks, offline_config
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer, data_dir

TASKS = data_dir()

pytest_plugins = ["pytester"]  # tests/pytest_plugin runs generated pytest projects


SLOW_LIST = Path(__file__).with_name("slow.txt")


def slow_entries() -> set[str]:
    """The tests of the slow tier (tests/slow.txt): ``FILE::NAME`` or ``FILE``."""
    lines = (line.split("#", 1)[0].strip() for line in SLOW_LIST.read_text().splitlines())
    return {line for line in lines if line}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests tests/slow.txt lists ``slow`` (``./scripts/test.sh --fast`` leaves them out)."""
    slow = slow_entries()
    for item in items:
        name = item.nodeid.split("[", 1)[0]
        if name in slow or name.split("::", 1)[0] in slow:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _process_logging_restored() -> Iterator[None]:
    """What ``webagent.cli.main`` sets for the whole process when a test calls it in-process
    (structlog's config bound to that test's captured stderr, the root logger's handlers, the
    excepthook) is undone after the test: later tests must not log into a closed capture file."""
    saved, handlers, hook = structlog.get_config(), list(logging.getLogger().handlers), sys.excepthook
    yield
    structlog.configure(**saved)
    logging.getLogger().handlers[:] = handlers
    sys.excepthook = hook


@pytest.fixture(scope="session")
def site() -> Iterator[SiteServer]:
    with SiteServer() as server:
        yield server


@pytest.fixture(scope="session")
def local_tasks(site: SiteServer) -> dict[str, dict[str, Any]]:
    return load_local_tasks(site.url)


@pytest.fixture(scope="session")
def launch_options(browser_name: str, browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """pytest-playwright's launch arguments, for webagent's launcher (which drives Chromium only)."""
    if browser_name != "chromium":
        pytest.fail(f"webagent's tests drive Chromium only, not {browser_name} (--browser)", pytrace=False)
    return dict(browser_type_launch_args)


@pytest.fixture(scope="session")
async def browser(launch_options: dict[str, Any]) -> AsyncIterator[Browser]:
    """One Chromium for the whole run (pytest-playwright's ``browser``, async)."""
    async with async_playwright() as playwright:
        shared = await launch_browser(playwright, BrowserConfig(), options=launch_options)
        yield shared
        await shared.close()


@pytest.fixture
async def own_browser(launch_options: dict[str, Any]) -> AsyncIterator[Browser]:
    """A Chromium of its own: crashing renderers must not risk the shared one."""
    async with async_playwright() as playwright:
        browser = await launch_browser(playwright, BrowserConfig(), options=launch_options)
        yield browser
        await browser.close()


def load_task_script(task_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((TASKS / "scripts" / f"{task_id}.json").read_text())
    return data


ServerFactory = Callable[[dict[str, Any] | str | Path], AbstractAsyncContextManager[FakeModelServer]]


@pytest.fixture
def model_server() -> ServerFactory:
    """``async with model_server(script) as server:`` — a fresh offline model server."""

    @asynccontextmanager
    async def factory(script: dict[str, Any] | str | Path) -> AsyncIterator[FakeModelServer]:
        async with FakeModelServer(script) as server:
            yield server

    return factory


def make_config(server: FakeModelServer, profile: str = "holo1.5", **agent: Any) -> AgentConfig:
    config = offline_config(server.url, profile, **agent)
    for role in ("policy", "localizer", "validator"):
        config.role(role).timeout_s = 5.0
    return config
