"""The public entry point: ``Agent(config).run(url, goal)`` and ``agent.stream(url, goal)``.

``Agent`` is the face of a ``Runtime`` (``webagent.runtime``: browsers, model endpoints, secrets,
the navigation guard): each call builds a ``RunSpec`` and hands it down.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict, Unpack

import structlog
from playwright.async_api import Browser, BrowserContext, Page

from .browser.pool import BrowserPool
from .budget import Budget
from .config import AgentConfig, AgentSettings, ContextSettings
from .errors import InputError
from .guard.navigation import NavigationPolicy
from .guard.secrets import Secrets
from .guard.urls import normalize_url
from .inputs import check_text
from .loop import HumanHandler, Roles, TaskHook
from .model.client import ModelClient
from .model.endpoints import EndpointPool
from .pilot import Pilot
from .records import ModelCall, Role, RunResult
from .replay import ReplayCache
from .runtime import RunSpec, Runtime, TraceMode
from .stream import RunStream

__all__ = ["Agent", "RunOptions"]

log = structlog.get_logger("webagent")


class RunOptions(TypedDict, total=False):
    """The keywords of ``Agent.stream`` (and ``run``, ``run_sync``) after the URL and the goal."""

    output_dir: str | Path | None
    context: BrowserContext | None
    page: Page | None
    expect: str | None
    settings: AgentSettings | None
    cache: ReplayCache | None
    cache_key: str | None
    budgets: list[Budget] | None
    trace: TraceMode
    har: bool | None
    navigate: bool
    policy: NavigationPolicy | None
    task: TaskHook | None
    browser: ContextSettings | None
    save_state: str | Path | None
    ask_user: HumanHandler | None
    secret_hosts: Sequence[str] | None


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
        ask_user: HumanHandler | None = None,
    ) -> None:
        """``require``: the roles whose endpoints must be configured (a ConfigError names the first
        missing; default: those runs call, the localizer only when it places the clicks); ``ask_user``:
        who answers the policy's questions in every run (``webagent.loop.human``)."""
        self.config = config or AgentConfig()
        #: What every run of this agent shares; entry points open runs and sessions through it.
        self.runtime = Runtime(self.config, browser=browser, require=require)
        self.runtime.ask_user = ask_user

    @property
    def browsers(self) -> BrowserPool:
        return self.runtime.browsers

    @property
    def secrets(self) -> Secrets:
        return self.runtime.secrets

    def endpoint_pool(self, role: str) -> EndpointPool:
        """The shared endpoints of one role."""
        return self.runtime.endpoint_pool(role)

    def model_client(self, role: Role) -> ModelClient:
        """A client of one role over its shared endpoints, redacting secrets from what it sends."""
        return self.runtime.model_client(role)

    def price(self, call: ModelCall) -> float:
        """Dollar cost of one model call at the configured per-role prices."""
        return self.runtime.price(call)

    def navigation_policy(
        self, start_url: str, *, trust_start: bool = True, local_hosts: Sequence[str] = ()
    ) -> NavigationPolicy:
        """The navigation policy of a run starting at ``start_url`` (``Runtime.navigation_policy``)."""
        return self.runtime.navigation_policy(start_url, trust_start=trust_start, local_hosts=local_hosts)

    def new_roles(self, policy: NavigationPolicy | None = None) -> Roles:
        """Role objects for one session (each sticks to the endpoint it first uses)."""
        return self.runtime.new_roles(policy)

    def pilot(
        self,
        page: Page,
        *,
        output_dir: str | Path | None = None,
        replay: ReplayCache | None = None,
        budgets: Sequence[Budget] = (),
        policy: NavigationPolicy | None = None,
        browser: ContextSettings | None = None,
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
        policy of a run starting at the page's current URL. ``browser``: the session settings the
        page's context was opened with (a signed-in state's values are then redacted too)."""
        return Pilot(
            self.runtime, page, output_dir=output_dir, replay=replay, budgets=budgets, policy=policy, browser=browser
        )

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
        har: bool | None = None,
        navigate: bool = True,
        policy: NavigationPolicy | None = None,
        task: TaskHook | None = None,
        browser: ContextSettings | None = None,
        save_state: str | Path | None = None,
        ask_user: HumanHandler | None = None,
        secret_hosts: Sequence[str] | None = None,
    ) -> RunStream:
        """Run a task step by step: ``async for step in agent.stream(url, goal)``.

        Pass ``context`` or ``page`` to drive your own Playwright objects (they are not closed).
        With ``output_dir`` the run directory (trajectory, screenshots, result, report) is written.
        ``expect`` is a statement the validator must also confirm about the final state;
        ``settings`` replaces the config's loop limits for this run; with ``cache`` recorded steps are
        replayed without model calls while the page matches (``cache_key`` names the recording,
        default the goal) and a successful re-planned run updates it; ``budgets`` are extra limits
        shared with other runs (the config's per-run budget always applies); ``trace`` keeps a
        Playwright trace (``trace.zip`` in ``output_dir``) always or only when the run fails; ``har``:
        write the run's network as ``network.har`` in ``output_dir`` (default: the config's ``[run]
        har``; a context of the run's own only, its secrets and cookie values redacted; ``har=True``
        with ``page``, ``context`` or no ``output_dir`` is an InputError);
        ``navigate=False`` (with ``page``) starts from the page as it is, ``url`` being its URL
        (what ``Pilot.act`` does); ``policy`` replaces the navigation policy built from ``url``;
        ``task``: a task that rewards itself (a benchmark page: ``webagent.tasks.benchmarks``), whose page
        ends the run and gives its success and reward; ``browser``: this run's own context settings
        over the config's ``[browser]`` (a signed-in ``storage_state``, a ``proxy``, a ``locale``, a
        ``device``, ...); ``save_state``: write the signed-in state there (0600) if the run succeeds;
        ``ask_user``: who answers the policy's questions (``webagent.loop.HumanHandler``: an async
        callable given a ``HumanRequest``, returning the answer or None; default the agent's
        ``ask_user``, else none: the run ends ``needs_human``); ``secret_hosts``: where the secrets
        without hosts of their own may be typed (host rules); default: ``[browser] allowed_domains``,
        else the start URL's host (the caller speaks for the operator), and with a ``policy`` of the
        caller's (a start someone else chose: a client's, a task file's) only ``allowed_domains``.
        """
        spec = RunSpec(
            url=url,
            goal=goal,
            expect=expect,
            settings=settings,
            shared_budgets=budgets or (),
            output_dir=Path(output_dir) if output_dir is not None else None,
            cache=cache,
            cache_key=cache_key or "",
            trace=trace,
            har=har,
            page=page,
            context=context,
            navigate=navigate,
            policy=policy,
            task=task,
            browser=browser,
            save_state=Path(save_state) if save_state is not None else None,
            ask_user=ask_user,
            secret_hosts=tuple(secret_hosts) if secret_hosts is not None else None,
        )
        return self.start(spec)

    def start(self, spec: RunSpec) -> RunStream:
        """The run of ``spec`` (what ``stream`` builds from its keywords, and what the task runner,
        the MCP server and the other drivers build from a task: ``TaskSpec.run_spec``), its outputs
        and limits in it. The URL is normalised, the goal checked (an InputError for an empty or
        unusable one, or for a HAR it cannot record), the loop settings default to the config's, the
        secrets' hosts to those of ``stream``, the replay's key to the goal; a run without a folder
        keeps no trace. The limits are applied once, by ``Runtime.resolve``."""
        url = normalize_url(spec.url)
        if not spec.navigate and spec.page is None:
            raise InputError("a run that does not open its start URL needs the page it starts from (page=)")
        goal = spec.goal
        if not goal or not goal.strip():
            raise InputError("no goal given: say what the agent should do, e.g. --goal 'Find the price of ...'")
        check_text(goal, "the goal")
        if spec.har and (spec.page is not None or spec.context is not None):
            raise InputError(
                "har=True records the run's own browser context: a caller's page or context is open already "
                "(open it with Playwright's record_har_path instead)"
            )
        if spec.har and spec.output_dir is None:
            raise InputError("har=True writes network.har in the run directory: give output_dir too")
        hosts = spec.secret_hosts
        if hosts is None:
            hosts = self.runtime.secret_hosts(url if spec.policy is None else None)
        spec = dataclasses.replace(
            spec,
            url=url,
            settings=spec.settings or self.config.agent,
            secret_hosts=hosts,
            cache_key=spec.cache_key or goal,
            trace=spec.trace if spec.output_dir is not None else "off",
        )
        return RunStream(self.runtime, spec)

    async def run(self, url: str, goal: str, **options: Unpack[RunOptions]) -> RunResult:
        """Run a task to the end and return its result (``options``: those of ``stream``)."""
        stream = self.stream(url, goal, **options)
        async for _ in stream:
            pass
        assert stream.result is not None
        return stream.result

    def run_sync(self, url: str, goal: str, **options: Unpack[RunOptions]) -> RunResult:
        """Blocking ``run`` for scripts; launches and closes its own browser."""

        async def main() -> RunResult:
            try:
                return await self.run(url, goal, **options)
            finally:
                await self.aclose()

        return asyncio.run(main())

    async def aclose(self) -> None:
        await self.runtime.aclose()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
