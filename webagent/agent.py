"""The public entry point: ``Agent(config).run(url, goal)`` and ``agent.stream(url, goal)``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import structlog
from playwright.async_api import Browser, BrowserContext, Page

from .browser.pool import BrowserPool
from .browser.session import BrowserSession
from .config import ROLES, AgentConfig
from .errors import InputError
from .loop import Episode, Roles
from .model.client import EndpointPool, ModelClient
from .records import RunResult, Step
from .roles.localizer import Localizer
from .roles.policy import Policy
from .roles.validator import Validator
from .trajectory import TrajectoryWriter
from .urls import normalize_url

__all__ = ["Agent", "RunStream"]

log = structlog.get_logger("webagent")


class Agent:
    """A web agent: three model roles and a pool of browsers.

    One Agent runs many tasks at once (``asyncio.gather`` over ``run``): they share the model
    endpoints' connection pools and a few Chromium processes, each task in its own context.
    """

    def __init__(
        self, config: AgentConfig | None = None, *, browser: Browser | None = None, require: Sequence[str] = ROLES
    ) -> None:
        """``require``: the roles whose endpoints must be configured (a ConfigError names the first missing)."""
        self.config = config or AgentConfig()
        self.config.require_endpoints(require)
        self.browsers = BrowserPool(self.config.browser, browser=browser)
        self._endpoints: dict[str, EndpointPool] = {}

    def endpoint_pool(self, role: str) -> EndpointPool:
        """The shared endpoints of one role."""
        if role not in self._endpoints:
            self._endpoints[role] = EndpointPool(role, self.config.role(role))
        return self._endpoints[role]

    def new_roles(self) -> Roles:
        """Role objects for one session (each sticks to the endpoint it first uses)."""
        client = {name: ModelClient(name, self.config.role(name), self.endpoint_pool(name)) for name in ROLES}
        return Roles(
            policy=Policy(client["policy"]),
            localizer=Localizer(client["localizer"], self.config.localizer),
            validator=Validator(client["validator"]),
        )

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
        for pool in self._endpoints.values():
            await pool.aclose()
        self._endpoints.clear()
        await self.browsers.aclose()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
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
        self.session: BrowserSession | None = None
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

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[BrowserSession]:
        config = self.agent.config.browser
        if self._page is not None:
            yield BrowserSession(self._page, config)
        elif self._context is not None:
            session = BrowserSession(await self._context.new_page(), config, owns_page=True)
            try:
                yield session
            finally:
                await session.close()
        else:
            async with self.agent.browsers.session() as session:
                yield session

    async def _run(self) -> AsyncIterator[Step]:
        roles = self.agent.new_roles()
        try:
            async with self._session() as session:
                self.session = session
                async for step in self._steps(roles, session):
                    yield step
        finally:
            for client in (roles.policy.client, roles.localizer.client, roles.validator.client):
                client.release()

    async def _steps(self, roles: Roles, session: BrowserSession) -> AsyncIterator[Step]:
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
