"""The browser sessions ``webagent mcp`` keeps between tool calls: a page each, driven by a ``Pilot``.

A session is a context of its own on the agent's pooled Chromium, opened on a URL under the
navigation policy of a run starting there. That policy stays the session's for its whole life:
its guard is set on the context when it opens and removed only when it closes, so that a page
that navigates itself between calls (a script, a meta refresh) cannot reach what the policy
refuses; ``act`` runs under it too (not under one built from wherever the page went), and
``check``, ``extract``, ``screenshot`` and ``act`` refuse a page whose URL it refuses.

A session may keep a named profile (``webagent mcp --profile-dir DIR``): ``DIR/<profile>/``, a
``webagent.browser.profile.Profile`` (0700, the state in ``state.json``, 0600), locked for the
session's whole life, so that no other session of this server or of another process (a second
server, ``webagent session start --profile``, ``webagent run --profile``) uses it meanwhile. Its
state is loaded into the session's context when it opens and saved back after each ``act`` and
when it closes, so that a client signs in once and later sessions (after a restart too) start
signed in; the lock goes when the session closes (``close_session``, idle, the server stopping, or
its browser lost). A profile of the older layout, ``DIR/<profile>.json``, is moved to
``DIR/<profile>/state.json`` the first time it is opened. The state's values are redacted from
what the session's calls write and send, as a storage state's are.

Ids are unguessable, and an error never lists the other sessions' ids. At most ``limit`` are open
at once; each closes on ``close_session`` (after the call in flight on it, waited for at most
``close_wait_s``), when unused for ``idle_timeout_s``, and all of them when the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from ..agent import Agent
from ..browser.context import save_storage_state
from ..browser.profile import Profile, ProfileInUse
from ..browser.session import BrowserSession
from ..budget import Budget
from ..config import ContextSettings
from ..errors import BrowserError, InputError, SessionError
from ..pilot import Pilot
from ..runtime.access import client_start

__all__ = ["CLOSE_WAIT_S", "DEFAULT_IDLE_TIMEOUT_S", "KeptSession", "SessionStore"]

log = structlog.get_logger("webagent.mcp")

#: How long ``close_session`` waits for a call in flight on the session before closing it anyway.
CLOSE_WAIT_S = 30.0
#: Sessions unused for this long are closed (``--session-idle-timeout``).
DEFAULT_IDLE_TIMEOUT_S = 900.0
#: How often the sessions are checked for a browser that is gone (at most).
LOST_CHECK_S = 30.0
_PROFILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


@dataclass
class KeptSession:
    """One open session: its id, its pilot (and page), its guarded browser session, what closes it."""

    id: str
    pilot: Pilot
    session: BrowserSession = field(repr=False)
    stack: contextlib.AsyncExitStack = field(repr=False)
    #: The URL and title it opened on (secrets redacted).
    url: str = ""
    title: str = ""
    last_used: float = field(default_factory=time.monotonic)
    calls: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    #: The session's profile (``--profile-dir``), held until it closes; None without one.
    profile: Profile | None = None

    def __post_init__(self) -> None:
        self.idle.set()

    @property
    def lost(self) -> bool:
        """Whether the session's browser is gone (crashed, or its context and every tab closed)."""
        session = self.session
        return session.browser_crashed or (session.page.is_closed() and not session.context.pages)

    async def follow_pilot(self) -> None:
        """After ``act``: the session's guard watches the tab the run ended on (a new tab), and its
        profile keeps the browser's state as it is now."""
        if not self.pilot.page.is_closed():
            await self.session.drive(self.pilot.page)
        await self.save_profile()

    async def save_profile(self) -> None:
        """Write the session's state to its profile (0600), and redact its values from now on."""
        if self.profile is None:
            return
        try:
            state = self.profile.state
            await save_storage_state(self.session.context, state, timeout_s=self.session.config.open_timeout_s)
        except (BrowserError, OSError) as exc:
            log.warning("mcp_profile_not_saved", session=self.id, error=str(exc))
            return
        self.pilot.browser = ContextSettings(storage_state=state)
        self.pilot.secrets = self.pilot.runtime.sessions.secrets(self.pilot.browser)


class SessionStore:
    """The open sessions of one server, bounded by ``limit``."""

    def __init__(
        self,
        agent: Agent,
        *,
        limit: int,
        output_dir: Path | None = None,
        budgets: Sequence[Budget] = (),
        idle_timeout_s: float | None = DEFAULT_IDLE_TIMEOUT_S,
        close_wait_s: float = CLOSE_WAIT_S,
        profile_dir: Path | None = None,
    ) -> None:
        """``idle_timeout_s``: close a session unused for that long (None or 0: never);
        ``profile_dir``: where the sessions' named profiles are kept (None: no profiles)."""
        self.profile_dir = profile_dir.expanduser().resolve() if profile_dir is not None else None
        self.agent = agent
        self.limit = limit
        self.output_dir = output_dir
        self.budgets = list(budgets)
        self.idle_timeout_s = idle_timeout_s or None
        self.close_wait_s = close_wait_s
        self._open: dict[str, KeptSession] = {}
        self._opening = 0
        self._lock = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None

    @property
    def ids(self) -> list[str]:
        return list(self._open)

    async def open(self, url: str, profile: str | None = None) -> KeptSession:
        """A new session on ``url`` (SessionError past the limit; InputError or NavigationError when
        the URL is invalid, refused (``runtime.access.client_start``) or cannot be opened), with the named
        ``profile``'s state when it has one, the profile locked until the session closes (InputError
        when it is in use). Closed again, and the profile released, when anything fails before it is
        handed out."""
        await self.close_lost()  # a session whose browser is gone gives its profile back
        held = self._acquire(profile)
        try:
            return await self._open_session(url, held)
        except BaseException:
            if held is not None:
                held.release()
            raise

    async def _open_session(self, url: str, held: Profile | None) -> KeptSession:
        url, policy = await client_start(self.agent.runtime, url, server="the MCP server")
        await self.close_idle()
        async with self._lock:
            if len(self._open) + self._opening >= self.limit:
                raise SessionError(
                    f"this server keeps at most {self.limit} open session(s) and they are all in use: close "
                    "one with close_session or start the server with a larger --max-sessions"
                )
            self._opening += 1
        stack = contextlib.AsyncExitStack()
        try:
            state = held.saved() if held is not None else None
            saved = ContextSettings(storage_state=state) if state is not None else None
            # Guarded until the session closes.
            session = await stack.enter_async_context(self.agent.runtime.open_session(policy, browser=saved))
            session_id = secrets.token_urlsafe(16)
            run_dir = self.output_dir / f"session-{session_id}" if self.output_dir is not None else None
            pilot = self.agent.pilot(
                session.page, output_dir=run_dir, budgets=self.budgets, policy=policy, browser=saved
            )
            await pilot.goto(url)
            async with self.agent.runtime.page_driver(pilot.page, secrets=pilot.secrets) as driver:  # redacted
                shown, title = driver.url, await driver.title()
        except BaseException:
            await stack.aclose()
            raise
        finally:
            self._opening -= 1
        kept = KeptSession(session_id, pilot, session, stack, url=shown, title=title, profile=held)
        self._open[session_id] = kept
        log.info("mcp_session_opened", session=session_id, url=shown)
        self._start_reaper()
        return kept

    def _acquire(self, name: str | None) -> Profile | None:
        """Profile ``name``, locked (None without one): InputError for a bad name, no profile
        directory, a profile in use (by an open session here, another server, ``webagent session``
        or ``webagent run``), or a folder that cannot be used. The error names the profile, never
        the server's paths. A state of the older layout (``DIR/<name>.json``) moves into it once."""
        if name is None or not name.strip():
            return None
        profile = Profile(self._profile_path(name))
        if any(kept.profile is not None and kept.profile.path == profile.path for kept in self._open.values()):
            raise InputError(f"profile {name!r} is in use by another open session: close it first")
        try:
            profile.acquire()
        except ProfileInUse:
            raise InputError(f"profile {name!r} is in use by another session or process: close it first") from None
        except InputError as exc:
            log.warning("mcp_profile_refused", profile=name, error=str(exc))
            raise InputError(
                f"profile {name!r} cannot be used: its folder is not private (see the server's log)"
            ) from None
        try:
            self._migrate(name, profile)
        except OSError as exc:
            log.warning("mcp_profile_not_migrated", profile=name, error=str(exc))
        return profile

    def _migrate(self, name: str, profile: Profile) -> None:
        """Move ``DIR/<name>.json`` (a profile's state before profiles were folders) into ``profile``,
        held, when it has no state of its own yet."""
        assert self.profile_dir is not None
        legacy = self.profile_dir / f"{name}.json"
        if legacy.is_symlink() or not legacy.is_file() or profile.state.exists():
            return
        legacy.chmod(0o600)
        os.replace(legacy, profile.state)
        log.info("mcp_profile_migrated", profile=name)

    def saved_state(self, name: str) -> Path:
        """The saved state of profile ``name`` for a run to start with (read, never written back,
        so not locked: a state is written whole): InputError for a bad name, no profile directory,
        or a profile with no state saved yet."""
        path = self._profile_path(name) / "state.json"
        legacy = path.parent.with_name(f"{name}.json")  # not opened by a session since the layout changed
        for state in (path, legacy):
            if state.is_file() and not state.is_symlink():
                return state
        raise InputError(f"profile {name!r} has no saved state yet: sign in on an open_session with it first")

    def _profile_path(self, name: str) -> Path:
        """The folder of profile ``name`` (InputError for a bad name or no profile directory): a
        name from a client is untrusted, and never reaches outside ``--profile-dir``."""
        if self.profile_dir is None:
            raise InputError("this server keeps no profiles: start it with --profile-dir DIR to use profile=")
        path = self.profile_dir / name
        if not _PROFILE_NAME.match(name) or path.resolve().parent != self.profile_dir:
            raise InputError(f"profile name {name[:40]!r} is not valid: use letters, digits, '-', '_' and '.'")
        return path

    def get(self, session_id: str) -> KeptSession:
        """The open session ``session_id`` (SessionError when there is none)."""
        kept = self._open.get(session_id.strip())
        if kept is None:
            raise SessionError(
                f"no open session has the id {session_id!r} (closed, closed after being unused, or never "
                "opened); open one with open_session"
            )
        return kept

    @contextlib.asynccontextmanager
    async def use(self, session_id: str) -> AsyncIterator[KeptSession]:
        """The open session ``session_id`` for one call: not idle meanwhile, and ``close`` waits for it."""
        await self.close_idle()
        kept = self.get(session_id)
        kept.calls += 1
        kept.idle.clear()
        try:
            yield kept
        finally:
            kept.calls -= 1
            kept.last_used = time.monotonic()
            if kept.calls == 0:
                kept.idle.set()

    async def close(self, session_id: str) -> None:
        """Close one session once the call in flight on it has ended (at most ``close_wait_s``);
        SessionError when it is not open."""
        kept = self.get(session_id)
        del self._open[kept.id]  # no new call starts on it
        if not kept.idle.is_set():
            try:
                async with asyncio.timeout(self.close_wait_s):
                    await kept.idle.wait()
            except TimeoutError:
                log.warning("mcp_session_closed_mid_call", session=kept.id, waited_s=self.close_wait_s)
        await self._close(kept, "closed")

    async def close_idle(self) -> None:
        """Close the sessions unused for ``idle_timeout_s`` (none while a call is in flight on it)."""
        if self.idle_timeout_s is None:
            return
        now = time.monotonic()
        for kept in list(self._open.values()):
            if kept.calls == 0 and now - kept.last_used >= self.idle_timeout_s and self._open.get(kept.id) is kept:
                del self._open[kept.id]
                await self._close(kept, "idle")

    async def close_lost(self) -> None:
        """Close the sessions whose browser is gone (none while a call is in flight on it), giving
        their profiles back."""
        for kept in list(self._open.values()):
            if kept.calls == 0 and kept.lost and self._open.get(kept.id) is kept:
                del self._open[kept.id]
                await self._close(kept, "browser lost")

    async def close_all(self) -> None:
        """Close every session (when the server stops)."""
        reaper, self._reaper = self._reaper, None
        if reaper is not None:
            reaper.cancel()
            await asyncio.gather(reaper, return_exceptions=True)
        while self._open:
            _, kept = self._open.popitem()
            await self._close(kept, "server stopping")

    async def _close(self, kept: KeptSession, why: str) -> None:
        try:
            await kept.save_profile()
            await kept.stack.aclose()
        except Exception as exc:  # one session that fails to close must not keep the others open
            log.warning("mcp_session_close_failed", session=kept.id, error=str(exc))
            return
        finally:
            if kept.profile is not None:
                kept.profile.release()
        log.info("mcp_session_closed", session=kept.id, why=why)

    def _start_reaper(self) -> None:
        """A background task closing idle sessions and those whose browser is gone (their profiles
        then free for other processes too): checked a few times per idle timeout, at most every
        ``LOST_CHECK_S``."""
        if self._reaper is not None and not self._reaper.done():
            return
        interval = min(LOST_CHECK_S, max(0.1, self.idle_timeout_s / 4)) if self.idle_timeout_s else LOST_CHECK_S

        async def reap() -> None:
            while self._open:
                await asyncio.sleep(interval)
                try:
                    await self.close_lost()
                    await self.close_idle()
                except Exception as exc:  # the next round tries again
                    log.warning("mcp_idle_close_failed", error=str(exc))

        self._reaper = asyncio.ensure_future(reap())
