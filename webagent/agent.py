"""The public entry point: ``Agent(config).run(url, goal)`` and ``agent.stream(url, goal)``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog
from playwright.async_api import Browser, BrowserContext, Page, Playwright, async_playwright

from .browser.launcher import launch_browser
from .browser.session import BrowserSession
from .config import ROLES, AgentConfig
from .errors import InputError
from .loop import Episode, Roles
from .model.client import ModelClient
from .records import RunResult, Step
from .roles.localizer import Localizer
from .roles.policy import Policy
from .roles.validator import Validator
from .trajectory import TrajectoryWriter
from .urls import normalize_url

__all__ = ["Agent", "RunStream"]

log = structlog.get_logger("webagent")


class Agent:
    """A web agent: three model roles and a shared browser.

    One Agent can run many tasks at once (``asyncio.gather`` over ``run``); they share the model
    clients' connection pools and one Chromium, each in its own browser context.
    """

    def __init__(self, config: AgentConfig | None = None, *, browser: Browser | None = None) -> None:
        self.config = config or AgentConfig()
        self.config.require_endpoints()
        self._browser = browser
        self._owns_browser = browser is None
        self._playwright: Playwright | None = None
        self._lock = asyncio.Lock()
        self._clients: dict[str, ModelClient] = {}
        self._roles: Roles | None = None

    @property
    def roles(self) -> Roles:
        if self._roles is None:
            self._clients = {name: ModelClient(name, self.config.role(name)) for name in ROLES}
            self._roles = Roles(
                policy=Policy(self._clients["policy"]),
                localizer=Localizer(self._clients["localizer"], self.config.localizer),
                validator=Validator(self._clients["validator"]),
            )
        return self._roles

    async def browser(self) -> Browser:
        """The shared browser, launched on first use."""
        async with self._lock:
            if self._browser is None or not self._browser.is_connected():
                if self._playwright is None:
                    self._playwright = await async_playwright().start()
                self._browser = await launch_browser(self._playwright, self.config.browser)
            return self._browser

    def stream(
        self,
        url: str,
        goal: str,
        *,
        output_dir: str | Path | None = None,
        context: BrowserContext | None = None,
        page: Page | None = None,
    ) -> RunStream:
        """Run a task step by step: ``async for step in agent.stream(url, goal)``.

        Pass ``context`` or ``page`` to drive your own Playwright objects (they are not closed).
        With ``output_dir`` the run directory (trajectory, screenshots, result, report) is written.
        """
        url = normalize_url(url)
        if not goal or not goal.strip():
            raise InputError("no goal given: say what the agent should do, e.g. --goal 'Find the price of ...'")
        return RunStream(self, url, goal, output_dir=output_dir, context=context, page=page)

    async def run(self, url: str, goal: str, **kwargs: Any) -> RunResult:
        """Run a task to the end and return its result."""
        stream = self.stream(url, goal, **kwargs)
        async for _ in stream:
            pass
        assert stream.result is not None
        return stream.result

    def run_sync(self, url: str, goal: str, **kwargs: Any) -> RunResult:
        """Blocking ``run`` for scripts; launches and closes its own browser."""

        async def main() -> RunResult:
            try:
                return await self.run(url, goal, **kwargs)
            finally:
                await self.aclose()

        return asyncio.run(main())

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()
        self._roles = None
        if self._owns_browser and self._browser is not None:
            with contextlib.suppress(Exception):
                await self._browser.close()
            self._browser = None
        if self._playwright is not None:
            await self._playwright.stop()
            self._playwright = None

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(
        self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
    ) -> None:
        await self.aclose()


class RunStream:
    """An async iterator of Steps; ``result`` is set once the run has ended."""

    def __init__(
        self,
        agent: Agent,
        url: str,
        goal: str,
        *,
        output_dir: str | Path | None,
        context: BrowserContext | None,
        page: Page | None,
    ) -> None:
        self.agent = agent
        self.url = url
        self.goal = goal
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self._context = context
        self._page = page
        self.result: RunResult | None = None
        self._gen: AsyncIterator[Step] | None = None

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> Step:
        if self._gen is None:
            self._gen = self._run()
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        if self._gen is not None:
            await self._gen.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _open_session(self) -> BrowserSession:
        config = self.agent.config.browser
        if self._page is not None:
            return BrowserSession(self._page, config)
        if self._context is not None:
            return BrowserSession(await self._context.new_page(), config)
        return await BrowserSession.create(await self.agent.browser(), config)

    async def _run(self) -> AsyncIterator[Step]:
        roles = self.agent.roles
        session = await self._open_session()
        writer: TrajectoryWriter | None = None
        episode = Episode(roles, session, self.agent.config.agent, url=self.url, goal=self.goal)
        steps = episode.steps()
        try:
            async for step in steps:
                if writer is None and self.output_dir is not None:
                    writer = TrajectoryWriter(self.output_dir)
                if writer is not None:
                    writer.write_step(step)
                yield step
        finally:
            await steps.aclose()  # type: ignore[attr-defined]
            self.result = episode.result
            if writer is not None and self.result is not None:
                self.result.output_dir = str(writer.directory)
                writer.write_result(self.result)
                writer.close()
                writer.write_report()
            if self._page is None:
                await session.close()
