"""``Runtime``: what every run of one agent shares, and the one place runs and sessions are opened.

The runtime holds the browser pool, the endpoint pools of the three roles, the secrets, the
session settings (``runtime.sessions``: what each context opens with), and the guard factory (a ``NavigationPolicy`` per start URL, a ``NavigationGuard`` enforcing it). Entry
points hand it a ``RunSpec`` (``open_episode``) or ask it for a guarded session (``open_session``,
what ``webagent mcp`` keeps between calls): calls go down, nothing below calls back up into
``Agent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import structlog
from playwright.async_api import Browser, BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

from ..browser.crashes import browser_failure
from ..browser.deadline import within
from ..browser.guard import NavigationGuard
from ..browser.pool import BrowserPool
from ..browser.providers import make_pool
from ..browser.secretpage import SecretPage
from ..browser.session import BrowserSession
from ..budget import Budget, BudgetLimits
from ..config import ROLES, AgentConfig, AgentSettings, ContextSettings
from ..files.downloads import DownloadFolder
from ..guard.hosts import is_private_host, url_host
from ..guard.navigation import NavigationPolicy
from ..guard.secrets import Secrets
from ..loop import Episode, HumanHandler, PageDriver, Roles
from ..model.client import ModelClient
from ..model.endpoints import EndpointPool
from ..records import ModelCall, Role
from ..roles.localizer import Localizer
from ..roles.policy import Policy, PolicyImages
from ..roles.validator import Validator
from ..telemetry import runs as telemetry
from .sessions import SessionSettings
from .spec import RunSpec

__all__ = ["Runtime"]

log = structlog.get_logger("webagent")


class Runtime:
    """The shared parts of one agent: browsers, model endpoints, secrets, the navigation guard.

    Many runs use one runtime at once (``asyncio.gather``): they share the endpoints' connection
    pools and a few Chromium processes, each run in its own context.
    """

    def __init__(
        self, config: AgentConfig, *, browser: Browser | None = None, require: Sequence[str] | None = None
    ) -> None:
        """``browser``: a caller's Chromium to open contexts on (never closed); ``require``: the roles
        whose endpoints must be configured (a ConfigError names the first missing; default: those
        runs call, the localizer only when it places the clicks)."""
        self.config = config
        config.require_endpoints(require)
        browser_config = config.browser
        if (config.secrets or browser_config.secret_bearing) and "direct_cdp" not in browser_config.model_fields_set:
            # Secrets are typed into pages, a signed-in state's cookies sit in the browser: no
            # DevTools port that other local users could reach, unless asked for (browser/devtools.py).
            browser_config = browser_config.model_copy(update={"direct_cdp": False})
        self.browsers: BrowserPool = make_pool(browser_config, config.secret_set(), browser=browser)
        self.sessions = SessionSettings(browser_config, config.secret_set(), self.browsers)
        self.sessions.check_reach()  # a secret of some hosts in a header sent everywhere: refused up front
        #: The config's secrets, and what its [browser] settings hold that is never written down.
        self.secrets = self.sessions.secrets()
        self._endpoints: dict[str, EndpointPool] = {}
        #: Who answers the policy's ``ask_user`` when a run spec names no one (None: no one).
        self.ask_user: HumanHandler | None = None
        #: The temporary download folders of runs and sessions without one of their own (removed at ``aclose``).
        self._scratch: list[DownloadFolder] = []

    # -- models ----------------------------------------------------------------------------------

    def endpoint_pool(self, role: str) -> EndpointPool:
        """The shared endpoints of one role (created on first use)."""
        if role not in self._endpoints:
            self._endpoints[role] = EndpointPool(role, self.config.role(role))
        return self._endpoints[role]

    def model_client(self, role: Role, secrets: Secrets | None = None) -> ModelClient:
        """A client of one role over its shared endpoints, redacting secrets (default: the
        runtime's) from what it sends."""
        secrets = self.secrets if secrets is None else secrets
        client = ModelClient(role, self.config.role(role), self.endpoint_pool(role))
        if secrets:
            client.secrets = secrets
        return client

    def price(self, call: ModelCall) -> float:
        """Dollar cost of one model call at the configured per-role prices."""
        return self.config.price(call)

    def new_roles(
        self, policy: NavigationPolicy | None = None, secrets: Secrets | None = None, uploads: Sequence[str] = ()
    ) -> Roles:
        """Role objects for one session (each sticks to the endpoint it first uses); ``uploads``: the
        names of the files the policy may upload."""
        secrets = self.secrets if secrets is None else secrets
        client = {name: self.model_client(name, secrets) for name in ROLES}
        restrictions = policy.describe() if policy is not None else ""
        follows = self.config.validator_follows_policy()
        return Roles(
            policy=Policy(
                client["policy"],
                secret_names=secrets.names,
                restrictions=restrictions,
                images=PolicyImages.from_config(self.config),
                output=self.config.policy.output,
                uploads=uploads,
            ),
            localizer=Localizer(client["localizer"], self.config.localizer),
            validator=Validator(
                client["validator"],
                extra_body=self.config.validator.extra_body(),
                follows_policy=follows,
                image_uuid=follows and self.config.policy.image_uuid,
            ),
        )

    def run_budgets(self, settings: AgentSettings | None = None, shared: Sequence[Budget] = ()) -> list[Budget]:
        """The budgets of one run: the settings' per-run limits (if any) first, then ``shared`` ones."""
        settings = settings or self.config.agent
        limits = BudgetLimits(calls=settings.budget_calls, tokens=settings.budget_tokens, usd=settings.budget_usd)
        own = [Budget(limits, self.price, scope="run")] if limits.active else []
        return own + list(shared)

    def resolve(self, spec: RunSpec) -> RunSpec:
        """``spec`` with its limits applied, once: its loop settings (default: the config's
        ``[agent]``) and its budgets (default: those settings' per-run limits, then its shared ones)."""
        settings = spec.settings or self.config.agent
        budgets = spec.budgets if spec.budgets is not None else self.run_budgets(settings, spec.shared_budgets)
        return dataclasses.replace(spec, settings=settings, budgets=budgets)

    # -- the guard -------------------------------------------------------------------------------

    def navigation_policy(
        self, start_url: str, *, trust_start: bool = True, local_hosts: Sequence[str] = ()
    ) -> NavigationPolicy:
        """The allowed/blocked hosts and private-network rule of a run starting at ``start_url``
        (``trust_start=False``: a URL a remote client chose; ``local_hosts``: private ``host:port``
        servers let through, see ``NavigationPolicy.build``)."""
        browser = self.config.browser
        return NavigationPolicy.build(
            allowed=browser.allowed_domains,
            blocked=browser.blocked_domains,
            private_network=browser.private_network,
            start_url=start_url,
            trust_start=trust_start,
            local_hosts=local_hosts,
        )

    def secret_hosts(self, start_url: str | None = None) -> tuple[str, ...]:
        """Where the secrets without hosts of their own may be typed in a run (host rules): the hosts
        of ``[browser] allowed_domains`` when set; else the host of ``start_url``, a start the operator
        chose (a private one as that one ``host:port``); else nowhere (None: a start someone else
        chose, a client's or an untrusted task file's)."""
        allowed = self.config.browser.allowed_domains
        if allowed:
            return tuple(allowed)
        if start_url is None:
            return ()
        parsed = url_host(start_url)
        if parsed is None:  # file: and the like: no host to type on
            return ()
        host = parsed[1]
        if is_private_host(host):
            return (f"[{host}]:{parsed[2]}" if ":" in host else f"{host}:{parsed[2]}",)
        return (f"[{host}]" if ":" in host else host,)

    def guard(self, policy: NavigationPolicy) -> NavigationGuard:
        """The guard enforcing ``policy`` on one session's context."""
        return NavigationGuard(policy)

    # -- sessions and runs -----------------------------------------------------------------------

    def download_folder(self, folder: DownloadFolder | None = None) -> DownloadFolder:
        """``folder``, or a private temporary one (``webagent.files.downloads``), removed when the runtime
        closes unless its holder removes it sooner (``DownloadFolder.remove``)."""
        if folder is not None:
            return folder
        self._scratch = [f for f in self._scratch if not f.removed]  # those removed by their holders: forgotten
        scratch = DownloadFolder()
        self._scratch.append(scratch)
        return scratch

    @contextlib.asynccontextmanager
    async def open_session(
        self,
        policy: NavigationPolicy,
        *,
        page: Page | None = None,
        context: BrowserContext | None = None,
        browser: ContextSettings | None = None,
        on_open: Callable[[BrowserSession], None] | None = None,
        on_queue: Callable[[bool], None] | None = None,
        downloads: DownloadFolder | None = None,
        har: Path | None = None,
    ) -> AsyncIterator[BrowserSession]:
        """A browser session under ``policy``'s guard (set before its first navigation, removed when it
        closes): on ``page``, a new tab in ``context``, or a new pooled context opened with the
        config's ``[browser]`` session settings and ``browser``'s over them. ``on_open`` is told
        the session as soon as it exists (before the guard is set, so that a browser dying there is
        known); ``on_queue`` whether it waits for its turn to open (``BrowserPool.session``);
        ``downloads``: where the pages' downloads are kept (default: a temporary folder,
        ``download_folder``); ``har``: where a pooled context records its HAR (Playwright's
        ``record_har_path``, written when it closes). A caller's page or context keeps its own
        ``accept_downloads``."""
        guard = self.guard(policy)
        config = self.browsers.config  # direct_cdp off with secrets (__init__)
        async with contextlib.AsyncExitStack() as stack:
            if page is not None:
                session = BrowserSession(page, config)
                stack.push_async_callback(session.close)
            elif context is not None:
                try:
                    new = await within(context.new_page(), config.open_timeout_s, "new_page")
                except PlaywrightError as exc:  # a crash (the context closed), a deadline, or else
                    raise browser_failure(exc, "cannot open a tab in the caller's context") from None
                session = BrowserSession(new, config, owns_page=True)
                stack.push_async_callback(session.close)
            else:
                options = await self.sessions.options(browser)
                if har is not None:
                    options |= {"record_har_path": str(har), "record_har_content": "embed"}
                pooled = self.browsers.session(guard=guard, on_queue=on_queue, options=options)
                session = await stack.enter_async_context(pooled)
            session.keep_downloads(self.download_folder(downloads))
            if on_open is not None:
                on_open(session)
            await session.set_guard(guard)
            yield session

    @contextlib.asynccontextmanager
    async def open_episode(
        self,
        spec: RunSpec,
        *,
        on_session: Callable[[BrowserSession], None] | None = None,
        on_progress: Callable[[], None] | None = None,
        on_queue: Callable[[bool], None] | None = None,
    ) -> AsyncIterator[Episode]:
        """An ``Episode`` of ``spec`` ready to run on a session with this runtime's protections,
        closed afterwards: the one setup of every run (``RunStream``, ``Pilot.act``, ``WebEnv``).

        The navigation guard of its policy, a session (``open_session``), secrets typed from
        placeholders and redacted from what the page shows, the roles' clients (released at the
        end), the run's budgets. ``on_session`` is told the session as soon as it exists;
        ``on_progress`` is called at each model answer; ``on_queue`` while the session waits to open.
        """
        spec = self.resolve(spec)
        policy = spec.policy if spec.policy is not None else self.navigation_policy(spec.url)
        settings = spec.settings or self.config.agent
        secrets = self.sessions.secrets(spec.browser)
        uploads = self.sessions.uploads(spec.browser)
        roles = self.new_roles(policy, secrets, uploads.names)
        clients = (roles.policy.client, roles.localizer.client, roles.validator.client)
        if on_progress is not None:
            for client in clients:
                client.on_answer = on_progress
        try:
            opening = self.open_session(
                policy,
                page=spec.page,
                context=spec.context,
                browser=spec.browser,
                on_open=on_session,
                on_queue=on_queue,
                downloads=spec.downloads,
                har=spec.har_path,
            )
            async with opening as session:
                hosts = spec.secret_hosts if spec.secret_hosts is not None else self.secret_hosts()
                driver: PageDriver = SecretPage(session, secrets, hosts=hosts) if secrets else session
                yield Episode(
                    roles,
                    driver,
                    settings,
                    url=spec.url,
                    goal=spec.goal,
                    judge=spec.judge,
                    expect=spec.expect,
                    replay=spec.replay,
                    budgets=spec.budgets or (),
                    navigate=spec.navigate,
                    task=spec.task,
                    uploads=uploads,
                    human=spec.ask_user if spec.ask_user is not None else self.ask_user,
                    downloads=lambda: session.downloads,
                )
        finally:
            for client in clients:
                client.release()

    @contextlib.asynccontextmanager
    async def page_driver(
        self,
        page: Page,
        *,
        guard_url: str | None = None,
        policy: NavigationPolicy | None = None,
        secrets: Secrets | None = None,
    ) -> AsyncIterator[PageDriver]:
        """A driver on a caller's page, as a run has it (secrets typed, masked and redacted), its
        set-up undone at the end. ``guard_url``: enforce the navigation policy of a run starting
        there (for opening it), or ``policy`` when given; without either the driver is for looking
        at the page only. ``secrets``: those of the page's session (default: the runtime's)."""
        secrets = self.secrets if secrets is None else secrets
        session = BrowserSession(page, self.browsers.config)
        try:
            if policy is None and guard_url is not None:
                policy = self.navigation_policy(guard_url)
            if policy is not None:
                await session.set_guard(self.guard(policy))
            yield SecretPage(session, secrets) if secrets else session
        finally:
            await session.close()

    async def aclose(self) -> None:
        """Close the endpoint pools and the browsers; push the traces ended so far (``webagent.telemetry``);
        remove the temporary download folders (``download_folder``)."""
        if telemetry.enabled():
            await asyncio.to_thread(telemetry.shutdown)
        for pool in self._endpoints.values():
            await pool.aclose()
        self._endpoints.clear()
        await self.browsers.aclose()
        scratch, self._scratch = self._scratch, []  # after the browsers: no download is still being copied
        for folder in scratch:
            await asyncio.to_thread(folder.remove)
