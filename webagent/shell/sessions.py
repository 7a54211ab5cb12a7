"""The sessions of the background process: each a guarded browser context of its own, with its
pilot (for ``act``, ``check``, ``extract``), its refs, its folder and, with ``--profile``, its
profile held locked.

Sessions with the same configuration share one ``Agent`` (one Chromium, a context each, as a batch
shares one); the DevTools port webagent opens for its own per-step commands is turned off here
(``direct_cdp``): Playwright drives Chromium over a pipe, and no port listens.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets as tokens
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from ..agent import Agent
from ..browser.context import save_storage_state
from ..browser.profile import Profile
from ..browser.secretpage import SecretPage
from ..browser.session import BrowserSession
from ..config import AgentConfig, ContextSettings
from ..errors import BrowserError, InputError, WebAgentError
from ..files.downloads import DownloadFolder
from ..guard.secrets import Secrets
from ..guard.urls import normalize_url
from ..loop import PageDriver
from ..pilot import Pilot
from .protocol import EXIT_BAD, EXIT_NO_BROWSER, ShellError
from .refs import RefTable

__all__ = ["SessionStore", "ShellSession"]

log = structlog.get_logger("webagent.shell")

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


@dataclass
class ShellSession:
    """One named session."""

    name: str
    agent: Agent
    session: BrowserSession
    pilot: Pilot
    driver: PageDriver
    secrets: Secrets
    folder: Path
    stack: contextlib.AsyncExitStack = field(repr=False)
    profile: Profile | None = None
    refs: RefTable = field(default_factory=RefTable)
    shots: int = 0
    #: The controls of the last ``snap`` (``snap --diff`` tells what changed since), None before one.
    last_snap: list[dict[str, Any]] | None = None
    #: A command found its browser gone (exit 6): ``start`` on its name replaces it.
    gone: bool = False

    @property
    def page_open(self) -> bool:
        return not self.session.page.is_closed()

    def follow(self) -> None:
        """The pilot on the tab the session drives now (a tab switch, a tab the page opened)."""
        self.pilot.page = self.session.page

    def check_alive(self) -> None:
        if (
            self.gone
            or self.session.browser_crashed
            or (self.session.page.is_closed() and not self.session.context.pages)
        ):
            raise ShellError(
                EXIT_NO_BROWSER,
                f"the browser of session {self.name!r} is gone: 'webagent session close --session {self.name}' and start it again",
            )

    async def save_profile(self) -> None:
        if self.profile is None:
            return
        try:
            await save_storage_state(
                self.session.context, self.profile.state, timeout_s=self.session.config.open_timeout_s
            )
        except (BrowserError, OSError) as exc:
            log.warning("shell_profile_not_saved", session=self.name, error=str(exc))


class SessionStore:
    """The open sessions by name, and the agents they share."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sessions: dict[str, ShellSession] = {}
        self._agents: dict[str, tuple[Agent, int]] = {}

    def get(self, name: str) -> ShellSession:
        found = self.sessions.get(name)
        if found is None:
            raise ShellError(
                EXIT_BAD, f"no open session {name!r}: start one with 'webagent session start --session {name}'"
            )
        return found

    async def open(
        self,
        name: str,
        payload: dict[str, Any],
        *,
        url: str | None,
        profile: Path | None,
        storage_state: Path | None,
    ) -> ShellSession:
        if not name or not set(name) <= _NAME_CHARS or name.startswith("."):
            raise ShellError(
                EXIT_BAD, f"session name {name[:40]!r} is not valid: use letters, digits, '-', '_' and '.'"
            )
        if name in self.sessions:
            old = self.sessions[name]
            if not (old.gone or old.session.browser_crashed or old.session.page.is_closed()):
                raise ShellError(EXIT_BAD, f"session {name!r} is open already: use it, or close it first")
            await self.close(name)  # its browser is gone: start again recovers
        if profile is not None and storage_state is not None:
            raise ShellError(EXIT_BAD, "--profile and --storage-state are two ways to start signed in: give one")
        kept = Profile(profile) if profile is not None else None
        if kept is not None:
            try:
                kept.acquire()
            except InputError as exc:
                raise ShellError(EXIT_BAD, str(exc)) from None
        stack = contextlib.AsyncExitStack()
        try:
            if kept is not None:
                stack.callback(kept.release)
            agent = await self._agent(payload, stack)
            start = normalize_url(url) if url else "about:blank"
            policy = agent.runtime.navigation_policy(start)
            saved = kept.saved() if kept is not None else None
            browser = ContextSettings(storage_state=saved) if saved is not None else None
            if storage_state is not None:
                browser = ContextSettings(storage_state=storage_state)
            folder = self.root / "sessions" / f"{name}-{tokens.token_hex(4)}"
            folder.mkdir(mode=0o700, parents=True)
            stack.callback(shutil.rmtree, folder, True)
            downloads = DownloadFolder(folder / "downloads", private=True)
            session = await stack.enter_async_context(
                agent.runtime.open_session(policy, browser=browser, downloads=downloads)
            )
            pilot = agent.pilot(session.page, output_dir=folder / "runs", policy=policy, browser=browser)
            secret_values = pilot.secrets
            hosts = agent.runtime.secret_hosts(url and start)
            driver: PageDriver = SecretPage(session, secret_values, hosts=hosts) if secret_values else session
            if url:
                await driver.goto(start, start=True)
        except BaseException:
            await stack.aclose()
            raise
        opened = ShellSession(name, agent, session, pilot, driver, secret_values, folder, stack, profile=kept)
        self.sessions[name] = opened
        log.info("shell_session_opened", session=name)
        return opened

    async def _agent(self, payload: dict[str, Any], stack: contextlib.AsyncExitStack) -> Agent:
        """The agent of this configuration (shared by the sessions that have it), released with ``stack``."""
        key = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
        if key in self._agents:
            agent, users = self._agents[key]
        else:
            try:
                config = AgentConfig.model_validate(payload)
            except ValueError as exc:
                raise ShellError(EXIT_BAD, f"the configuration is not valid: {str(exc).splitlines()[0]}") from None
            config.browser.direct_cdp = False  # no DevTools port: Playwright's pipe only
            agent, users = Agent(config), 0
        self._agents[key] = (agent, users + 1)

        async def release() -> None:
            held, count = self._agents[key]
            if count <= 1:
                del self._agents[key]
                await held.aclose()
            else:
                self._agents[key] = (held, count - 1)

        stack.push_async_callback(release)
        return agent

    async def close(self, name: str) -> None:
        kept = self.get(name)
        del self.sessions[name]
        await kept.save_profile()
        try:
            await kept.stack.aclose()
        except WebAgentError as exc:
            log.warning("shell_session_close_failed", session=name, error=str(exc))
        log.info("shell_session_closed", session=name)

    async def close_all(self) -> list[str]:
        names = list(self.sessions)
        for name in names:
            await self.close(name)
        return names
