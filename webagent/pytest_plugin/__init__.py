"""webagent's pytest plugin: natural-language steps and checks in pytest-playwright tests.

    def test_checkout(web, page):
        page.goto(shop_url)
        web.act("add the blue widget to the cart and open the cart")
        web.check("the cart shows one blue widget at $12.50")     # AssertionError with the feedback
        total = web.extract("the cart total", schema=Money)        # a validated Pydantic model

Registered through the ``pytest11`` entry point ``webagent``; it does something only beside
pytest-playwright (``pip install 'webagent[pytest]'``: sync tests, ``web`` is a ``Web``) or
pytest-playwright-asyncio (``'webagent[pytest-async]'``: async tests, ``web`` is an
``AsyncWeb``), whichever is loaded; the two cannot be loaded together. Without either, a test
asking for ``web`` fails saying what to install, and nothing else changes.

The parts: ``options`` (command line and ini), ``fixtures`` (config, launch arguments, ``web`` without pytest-playwright),
``sync_fixtures`` / ``async_fixtures`` (``web``), ``session`` (the agent and budgets of the run),
``web`` (``Web``, ``AsyncWeb``), ``bridge`` (async webagent on a sync page), ``artifacts`` (a
replay file per test, run folders in pytest-playwright's ``--output``). The guide: docs/pytest.md.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from .web import AsyncWeb, Web

from .options import MISSING, REPORTS, SETTINGS, add_options, read_settings

__all__ = ["AsyncWeb", "Web", "playwright_variant"]


def __getattr__(name: str) -> Any:
    # ``Web`` and ``AsyncWeb`` (for type hints in tests) import the agent: only when asked for.
    if name in ("Web", "AsyncWeb"):
        from . import web

        return getattr(web, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


Variant = Literal["sync", "asyncio"]
_VARIANTS: tuple[tuple[str, Variant], ...] = (
    ("pytest_playwright.pytest_playwright", "sync"),
    ("pytest_playwright_asyncio.pytest_playwright", "asyncio"),
)


def playwright_variant(manager: pytest.PytestPluginManager) -> Variant | None:
    """Which pytest-playwright is loaded: the sync one, the asyncio one, or none."""
    for module_name, variant in _VARIANTS:
        module = sys.modules.get(module_name)
        if module is not None and manager.is_registered(module):
            return variant
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


class _WithoutPlaywright:
    """The ``web`` of a run without pytest-playwright: fails the test that asks for it, saying what
    to install (and imports nothing of webagent: the entry point is loaded by every pytest run
    where webagent is installed)."""

    @pytest.fixture
    def web(self) -> None:
        pytest.fail(MISSING, pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SETTINGS] = read_settings(config)
    variant = playwright_variant(config.pluginmanager)
    if variant is None:
        config.pluginmanager.register(_WithoutPlaywright(), "webagent-web")
        return
    from . import fixtures
    from .artifacts import KeptReports

    config.pluginmanager.register(KeptReports(), "webagent-reports")
    config.pluginmanager.register(fixtures, "webagent-fixtures")
    if variant == "sync":
        from . import sync_fixtures

        config.pluginmanager.register(sync_fixtures, "webagent-web")
    else:
        from . import async_fixtures

        config.pluginmanager.register(async_fixtures, "webagent-web")


def pytest_report_header(config: pytest.Config) -> str | None:
    variant = playwright_variant(config.pluginmanager)
    if variant is None:
        return None
    settings = config.stash[SETTINGS]
    source = f", config {settings.config_path}" if settings.config_path else ""
    api = "pytest-playwright (sync tests)" if variant == "sync" else "pytest-playwright-asyncio (async tests)"
    return f"webagent: {api}, cache {settings.cache}, runs {settings.runs}{source}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.stash.setdefault(REPORTS, {})[report.when] = report
    return report
