"""What the plugin keeps for a whole pytest run (one per xdist worker), and what it makes per test.

``WebSession`` holds the settings, the agent's config and, from the first test that asks for
``web``, one ``Agent`` (its model clients' connection pools are shared by all the tests of the run,
on the event loop they run on: Playwright's own under the sync API, the session loop under
pytest-playwright-asyncio) and the session's budget. ``open_test`` makes a test's ``AsyncWeb``:
a pilot on its page with its replay cache, its budgets and its run folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import structlog
from playwright.async_api import Page as AsyncPage

from ..agent import Agent
from ..budget import Budget
from ..config import AgentConfig
from ..errors import WebAgentError
from .artifacts import RunFolder, display_path
from .budgets import per_session_budget, per_test_budget
from .cache import cache_path, open_cache
from .options import PluginSettings
from .web import AsyncWeb, Deadlines

__all__ = ["TestState", "WebSession"]

log = structlog.get_logger("webagent.pytest")

#: Beyond the run's own limits, what a whole call may take (opening, closing, writing the report).
_MARGIN_S = 60.0


@dataclass
class TestState:
    """One test's ``web``: its pilot's runs and where they go."""

    web: AsyncWeb
    runs: RunFolder
    cache_file: Path | None
    budgets: list[Budget] = field(default_factory=list)


class WebSession:
    """The plugin's state for one pytest run (per worker under xdist)."""

    def __init__(self, settings: PluginSettings, config: AgentConfig, *, shared_dir: Path, invocation_dir: Path):
        self.settings = settings
        self.config = config
        self.invocation_dir = invocation_dir
        self.budget = per_session_budget(settings.max_calls_per_session, config.price, shared_dir)
        self._agent: Agent | None = None
        browser = config.browser
        self.deadlines = Deadlines(
            act_s=config.agent.max_time_s + browser.open_timeout_s + _MARGIN_S,
            look_s=max(
                config.role(role).timeout_s * (config.role(role).max_retries + 2) for role in ("policy", "validator")
            )
            + browser.capture_timeout_s
            + browser.open_timeout_s
            + _MARGIN_S,
        )

    @classmethod
    def from_settings(cls, settings: PluginSettings, *, shared_dir: Path, invocation_dir: Path) -> WebSession:
        """Load the config; a bad one fails the tests that use ``web`` with its one-line message."""
        try:
            config = settings.load_config()
        except WebAgentError as exc:
            pytest.fail(f"webagent: {exc}", pytrace=False)
        return cls(settings, config, shared_dir=shared_dir, invocation_dir=invocation_dir)

    @property
    def agent(self) -> Agent:
        """The run's agent (made on first use: a config without endpoints fails the test in one line)."""
        if self._agent is None:
            try:
                self._agent = Agent(self.config)
            except WebAgentError as exc:
                pytest.fail(f"webagent: {exc}", pytrace=False)
        return self._agent

    def open_test(self, item: pytest.Item, page: AsyncPage, output_path: str | Path) -> TestState:
        """The ``web`` of one test on ``page``."""
        runs = RunFolder(output_path, self.settings.runs, self.invocation_dir)
        cache_file = cache_path(item.path, item.name) if self.settings.cache != "off" else None
        try:
            cache = open_cache(self.settings.cache, cache_file) if cache_file is not None else None
        except WebAgentError as exc:
            pytest.fail(f"webagent: {exc}", pytrace=False)
        own = per_test_budget(self.settings.max_calls_per_test, self.config.price)
        budgets = [b for b in (own, self.budget) if b is not None]
        pilot = self.agent.pilot(page, output_dir=runs.output_dir, replay=cache, budgets=budgets)
        return TestState(web=AsyncWeb(pilot, runs), runs=runs, cache_file=cache_file, budgets=budgets)

    def finish_test(self, item: pytest.Item, state: TestState, failed: bool) -> None:
        """At a test's end: keep or remove its run folders, and name the reports kept in its report."""
        kept = state.runs.finish(failed)
        for report in kept:
            item.user_properties.append(("webagent_report", display_path(report, self.invocation_dir)))
        usage = state.web.pilot.usage
        calls = sum(usage.role(role).calls for role in ("policy", "localizer", "validator"))
        item.user_properties.append(("webagent_model_calls", calls))

    async def aclose(self) -> None:
        """Close the agent's connection pools (on the loop they were used on)."""
        if self._agent is not None:
            agent, self._agent = self._agent, None
            await agent.aclose()
