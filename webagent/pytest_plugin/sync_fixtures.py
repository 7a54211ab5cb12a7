"""The ``web`` fixture of sync tests, on pytest-playwright's ``page`` (registered when it is loaded)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, Playwright

from .artifacts import item_failed
from .bridge import async_page, run
from .fixtures import require_chromium, shared_dir
from .options import SETTINGS
from .session import WebSession
from .web import Web

__all__ = ["web", "webagent_session"]

_CLOSE_TIMEOUT_S = 60.0


@pytest.fixture(scope="session")
def webagent_session(
    pytestconfig: pytest.Config, playwright: Playwright, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebSession]:
    """The plugin's state for the run; its agent closes on Playwright's loop before Playwright stops."""
    session = WebSession.from_settings(
        pytestconfig.stash[SETTINGS],
        shared_dir=shared_dir(pytestconfig, tmp_path_factory),
        invocation_dir=pytestconfig.invocation_params.dir,
    )
    yield session
    run(playwright, session.aclose(), timeout_s=_CLOSE_TIMEOUT_S, what="closing webagent's agent")


@pytest.fixture
def web(
    page: Page, output_path: str, browser_name: str, webagent_session: WebSession, request: pytest.FixtureRequest
) -> Iterator[Web]:
    """Natural-language steps and checks on pytest-playwright's ``page``: ``web.act``, ``web.check``,
    ``web.extract``."""
    require_chromium(browser_name)
    state = webagent_session.open_test(request.node, async_page(page), output_path)
    yield Web(page, state.web, webagent_session.deadlines)
    webagent_session.finish_test(request.node, state, item_failed(request.node))
