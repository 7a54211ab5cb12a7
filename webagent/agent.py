"""The public entry point: ``Agent(config).run(url, goal)`` and ``agent.stream(url, goal)``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import structlog
from playwright.async_api import Browser, BrowserContext, Page

from .browser.deadline import within
from .browser.guard import NavigationGuard
from .browser.pool import BrowserPool
from .browser.secretpage import SecretPage
from .browser.session import BrowserSession
from .budget import Budget, BudgetLimits
from .config import ROLES, AgentConfig, AgentSettings
from .errors import InputError
from .inputs import check_text
from .loop import Episode, Judge, PageDriver, Roles, TaskHook
from .model.client import ModelClient
from .model.endpoints import EndpointPool
from .pilot import Pilot
from .records import ModelCall, RunResult
from .replay import ReplayCache, StepReplay
from .roles.localizer import Localizer
from .roles.policy import Policy, PolicyImages
from .roles.validator import Validator
from .safety import NavigationPolicy
from .secrets import Secrets
from .stream import RunStream, TraceMode
from .urls import normalize_url

__all__ = ["Agent"]

log = structlog.get_logger("webagent")


class Agent:
    """A web agent: three model roles and a pool of browsers.

    One Agent runs many tasks at once (``asyncio.gather`` over ``run``): they share the model
    endpoints' connection pools and a few Chromium processes, each task in its own context.
    """

    def __init__(
        self,
        config: AgentConfig | None = None,
        *,
        browser: Browser | None = None,
        require: Sequence[str] | None = None,
    ) -> None:
        """``require``: the roles whose endpoints must be configured (a ConfigError names the first
        missing; default: those runs call, the localizer only when it places the clicks)."""
        self.config = config or AgentConfig()
        self.config.require_endpoints(require)
        browser_config = self.config.browser
        if self.config.secrets and "direct_cdp" not in browser_config.model_fields_set:
            # Secrets are typed into pages: no DevTools port that other local users could reach,
            # unless asked for (webagent.browser.devtools).
            browser_config = browser_config.model_copy(update={"direct_cdp": False})
        self.browsers = BrowserPool(browser_config, browser=browser)
        self.secrets = Secrets(self.config.secrets)
        self._endpoints: dict[str, EndpointPool] = {}

    def endpoint_pool(self, role: str) -> EndpointPool:
        """The shared endpoints of one role."""
        if role not in self._endpoints:
            self._endpoints[role] = EndpointPool(role, self.config.role(role))
        return self._endpoints[role]

    def price(self, call: ModelCall) -> float:
        """Dollar cost of one model call at the configured per-role prices."""
        return self.config.price(call)

    def navigation_policy(self, start_url: str, *, trust_start: bool = True) -> NavigationPolicy:
        """The allowed/blocked hosts and private-network rule of a run starting at ``start_url``
        (``trust_start=False``: a URL a remote client chose, see ``NavigationPolicy.build``)."""
        browser = self.config.browser
        return NavigationPolicy.build(
            allowed=browser.allowed_domains,
            blocked=browser.blocked_domains,
            private_network=browser.private_network,
            start_url=start_url,
            trust_start=trust_start,
        )

    def model_client(self, role: str) -> ModelClient:
        """A client of one role over its shared endpoints, redacting secrets from what it sends."""
        client = ModelClient(role, self.config.role(role), self.endpoint_pool(role))
        if self.secrets:
            client.secrets = self.secrets
        return client

    def new_roles(self, policy: NavigationPolicy | None = None) -> Roles:
        """Role objects for one session (each sticks to the endpoint it first uses)."""
        client = {name: self.model_client(name) for name in ROLES}
        restrictions = policy.describe() if policy is not None else ""
        follows = self.config.validator_follows_policy()
        return Roles(
            policy=Policy(
                client["policy"],
                secret_names=self.secrets.names,
                restrictions=restrictions,
                images=PolicyImages.from_config(self.config),
                output=self.config.policy.output,
            ),
            localizer=Localizer(client["localizer"], self.config.localizer),
            validator=Validator(
                client["validator"],
                extra_body=self.config.validator.extra_body(),
                follows_policy=follows,
                image_uuid=follows and self.config.policy.image_uuid,
            ),
        )

    def run_budgets(self, settings: AgentSettings, shared: Sequence[Budget] = ()) -> list[Budget]:
        """The budgets of one run: the settings' per-run limits (if any) first, then ``shared`` ones."""
        limits = BudgetLimits(calls=settings.budget_calls, tokens=settings.budget_tokens, usd=settings.budget_usd)
        own = [Budget(limits, self.price, scope="run")] if limits.active else []
        return own + list(shared)

    @contextlib.asynccontextmanager
    async def open_episode(
        self,
        url: str,
        goal: str,
        *,
        settings: AgentSettings | None = None,
        context: BrowserContext | None = None,
        page: Page | None = None,
        judge: Judge | None = None,
        expect: str | None = None,
        replay: StepReplay | None = None,
        budgets: Sequence[Budget] | None = None,
        on_session: Callable[[BrowserSession], None] | None = None,
        on_progress: Callable[[], None] | None = None,
        on_queue: Callable[[bool], None] | None = None,
        navigate: bool = True,
        policy: NavigationPolicy | None = None,
        task: TaskHook | None = None,
    ) -> AsyncIterator[Episode]:
        """An ``Episode`` ready to run on a session with this agent's protections, closed afterwards.

        The one setup of every run, for ``RunStream`` and ``WebEnv`` alike: the navigation guard
        of ``url``, a session (on ``page``, in ``context``, or from the pool), secrets typed from
        placeholders and redacted from what the page shows, the roles' clients (released at the
        end), the run's budgets. ``on_session`` is told the session as soon as it exists (before
        the guard is set, so that a browser dying there is known); ``budgets``: the run's budgets
        (default ``run_budgets(settings)``); ``on_progress`` is called at each
        model answer; ``navigate=False`` starts from ``page`` as it is (``url`` being its URL);
        ``policy``: the navigation policy to enforce (default: that of a run starting at ``url``);
        ``task``: a task that rewards itself (``webagent.loop.task``: a benchmark page).
        """
        policy = policy if policy is not None else self.navigation_policy(url)
        roles = self.new_roles(policy)
        clients = (roles.policy.client, roles.localizer.client, roles.validator.client)
        if on_progress is not None:
            for client in clients:
                client.on_answer = on_progress
        try:
            opening = self._session(NavigationGuard(policy), context=context, page=page, on_queue=on_queue)
            async with opening as (session, guard):
                if on_session is not None:
                    on_session(session)
                await session.set_guard(guard)
                driver: PageDriver = SecretPage(session, self.secrets) if self.secrets else session
                yield Episode(
                    roles,
                    driver,
                    settings or self.config.agent,
                    url=url,
                    goal=goal,
                    judge=judge,
                    expect=expect,
                    replay=replay,
                    budgets=self.run_budgets(settings or self.config.agent) if budgets is None else budgets,
                    navigate=navigate,
                    task=task,
                )
        finally:
            for client in clients:
                client.release()

    @contextlib.asynccontextmanager
    async def _session(
        self,
        guard: NavigationGuard,
        *,
        context: BrowserContext | None,
        page: Page | None,
        on_queue: Callable[[bool], None] | None,
    ) -> AsyncIterator[tuple[BrowserSession, NavigationGuard]]:
        config = self.browsers.config  # direct_cdp off with secrets (__init__)
        if page is not None:
            session = BrowserSession(page, config)
        elif context is not None:
            new = await within(context.new_page(), config.open_timeout_s, "new_page")
            session = BrowserSession(new, config, owns_page=True)
        else:
            async with self.browsers.session(guard=guard, on_queue=on_queue) as pooled:
                yield pooled, guard
            return
        try:
            yield session, guard
        finally:
            await session.close()

    @contextlib.asynccontextmanager
    async def page_driver(
        self, page: Page, *, guard_url: str | None = None, policy: NavigationPolicy | None = None
    ) -> AsyncIterator[PageDriver]:
        """A driver on a caller's page, as a run has it (secrets typed, masked and redacted), its
        set-up undone at the end. ``guard_url``: enforce the navigation policy of a run starting
        there (for opening it), or ``policy`` when given; without either the driver is for looking
        at the page only."""
        session = BrowserSession(page, self.browsers.config)
        try:
            if policy is None and guard_url is not None:
                policy = self.navigation_policy(guard_url)
            if policy is not None:
                await session.set_guard(NavigationGuard(policy))
            yield SecretPage(session, self.secrets) if self.secrets else session
        finally:
            await session.close()

    def pilot(
        self,
        page: Page,
        *,
        output_dir: str | Path | None = None,
        replay: ReplayCache | None = None,
        budgets: Sequence[Budget] = (),
        policy: NavigationPolicy | None = None,
    ) -> Pilot:
        """Steps, checks and extractions on a page the caller drives (``webagent.pilot``): ``act``
        runs the agent from the page as it is, ``check`` asks the validator whether a statement
        holds there, ``extract`` returns structured data. The page is never closed. With
        ``output_dir`` each call writes its run directory there (``act-1``, ``check-1``, ...); with
        ``replay`` an unchanged page is answered from the cache without model calls; ``budgets``
        are limits shared with other runs (the config's per-run budget applies to each call).
        ``policy``: one navigation policy for every call (what ``webagent mcp`` gives a kept
        session: that of its start URL), enforced by ``act``'s runs, and ``check``, ``extract``,
        ``screenshot`` and ``act`` refuse a page it refuses; without it each ``act`` gets the
        policy of a run starting at the page's current URL."""
        return Pilot(self, page, output_dir=output_dir, replay=replay, budgets=budgets, policy=policy)

    def stream(
        self,
        url: str,
        goal: str,
        *,
        output_dir: str | Path | None = None,
        context: BrowserContext | None = None,
        page: Page | None = None,
        expect: str | None = None,
        settings: AgentSettings | None = None,
        cache: ReplayCache | None = None,
        cache_key: str | None = None,
        budgets: list[Budget] | None = None,
        trace: TraceMode = "off",
        navigate: bool = True,
        policy: NavigationPolicy | None = None,
        task: TaskHook | None = None,
    ) -> RunStream:
        """Run a task step by step: ``async for step in agent.stream(url, goal)``.

        Pass ``context`` or ``page`` to drive your own Playwright objects (they are not closed).
        With ``output_dir`` the run directory (trajectory, screenshots, result, report) is written.
        ``expect`` is a statement the validator must also confirm about the final state;
        ``settings`` replaces the config's loop limits for this run; with ``cache`` recorded steps are
        replayed without model calls while the page matches (``cache_key`` names the recording,
        default the goal) and a successful re-planned run updates it; ``budgets`` are extra limits
        shared with other runs (the config's per-run budget always applies); ``trace`` keeps a
        Playwright trace (``trace.zip`` in ``output_dir``) always or only when the run fails;
        ``navigate=False`` (with ``page``) starts from the page as it is, ``url`` being its URL
        (what ``Pilot.act`` does); ``policy`` replaces the navigation policy built from ``url``;
        ``task``: a task that rewards itself (a benchmark page: ``webagent.env.tasks``), whose page
        ends the run and gives its success and reward.
        """
        url = normalize_url(url)
        if not navigate and page is None:
            raise InputError("a run that does not open its start URL needs the page it starts from (page=)")
        if not goal or not goal.strip():
            raise InputError("no goal given: say what the agent should do, e.g. --goal 'Find the price of ...'")
        check_text(goal, "the goal")
        return RunStream(
            self,
            url,
            goal,
            output_dir=output_dir,
            context=context,
            page=page,
            expect=expect,
            settings=settings or self.config.agent,
            cache=cache,
            cache_key=cache_key or goal,
            budgets=budgets or [],
            trace=trace if output_dir is not None else "off",
            navigate=navigate,
            policy=policy,
            task=task,
        )

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
