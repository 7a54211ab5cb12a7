"""The ``web`` fixture of async tests, on pytest-playwright-asyncio's ``page`` (registered when it is loaded).

pytest-playwright-asyncio runs Playwright on pytest-asyncio's session loop, so these fixtures do
too (``loop_scope="session"``), and so must the tests that use them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from playwright.async_api import Page

from .artifacts import item_failed
from .fixtures import require_chromium, shared_dir
from .options import SETTINGS
from .session import WebSession
from .web import AsyncWeb

__all__ = ["web", "webagent_session"]

_CLOSE_TIMEOUT_S = 60.0


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def webagent_session(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[WebSession]:
    """The plugin's state for the run; its agent closes on the session loop."""
    session = WebSession.from_settings(
        pytestconfig.stash[SETTINGS],
        shared_dir=shared_dir(pytestconfig, tmp_path_factory),
        invocation_dir=pytestconfig.invocation_params.dir,
    )
    yield session
    async with asyncio.timeout(_CLOSE_TIMEOUT_S):
        await session.aclose()


@pytest_asyncio.fixture(loop_scope="session")
async def web(
    page: Page, output_path: str, browser_name: str, webagent_session: WebSession, request: pytest.FixtureRequest
) -> AsyncIterator[AsyncWeb]:
    """Natural-language steps and checks on pytest-playwright-asyncio's ``page``: ``await web.act(...)``."""
    require_chromium(browser_name)
    state = webagent_session.open_test(request.node, page, output_path)
    yield state.web
    webagent_session.finish_test(request.node, state, item_failed(request.node))
