"""Shared fixtures: the local task sites, one Chromium for the whole run, the offline model server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, async_playwright

from webagent.browser.launcher import launch_browser
from webagent.config import AgentConfig, BrowserConfig
from webagent.prompts import resource_dir
from webagent.testing.offline import load_local_tasks, offline_config
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

TASKS = resource_dir("tasks")


@pytest.fixture(scope="session")
def site() -> Iterator[SiteServer]:
    with SiteServer() as server:
        yield server


@pytest.fixture(scope="session")
def local_tasks(site: SiteServer) -> dict[str, dict[str, Any]]:
    return load_local_tasks(site.url)


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        shared = await launch_browser(playwright, BrowserConfig())
        yield shared
        await shared.close()


@pytest.fixture
async def own_browser() -> AsyncIterator[Browser]:
    """A Chromium of its own: crashing renderers must not risk the shared one."""
    async with async_playwright() as playwright:
        browser = await launch_browser(playwright, BrowserConfig())
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
