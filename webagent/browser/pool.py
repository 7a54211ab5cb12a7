"""A small pool of Chromium processes shared by many sessions (one context each).

Each browser serves at most ``contexts_per_browser`` sessions at once and ``recycle_after``
sessions in its life; then it is retired and closed once its last session ends, so leaks in a
long-running Chromium do not accumulate. A browser that dies is dropped; new sessions get a fresh
one, and ``BrowserSession.browser_crashed`` tells the sessions it carried. A browser opens
``OPENS_AT_ONCE`` sessions at a time (hundreds of ``new_context`` at once all wait on Chromium's one
UI thread: 500 took over a minute on 2 cores, past any sensible deadline); one that does not answer
opening a context or tab within ``open_timeout_s`` even so (frozen) is retired the same way: no new
session goes to it, and it is closed once its sessions have ended.

Crashes under load: the driver may report a browser's death a moment after the calls on it
failed, so a session that cannot be opened waits briefly for that report before it blames the
browser (and then goes to another browser, launched if need be: at most ``SESSION_TRIES`` times).
Browsers are launched one at a time, under the pool's lock: the sessions that wait for a
replacement get it once it is up (connected), never the dead one. A replacement that cannot be
launched is tried again (``LAUNCH_TRIES``), unless no browser was ever launched (then a bad
executable is one error up front).

Sessions under a navigation guard get *hardened* browsers (``launcher.HARDENED_ARGS``: the
channels the guard cannot see into switched off), the others plain ones: the two never share a
browser. A browser handed to the pool (``browser=``) serves both, as it was launched.

With a remote browser (``browser.ws_endpoint`` / ``cdp_endpoint``) each pooled "browser" is a
connection: recycling closes the connection and opens a new one (a Playwright server launches a
fresh browser for it; over CDP the same browser is reached again), and a lost connection is
replaced by reconnecting for the next session.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from playwright.async_api import Browser, Playwright, async_playwright

from ..config import BrowserConfig
from ..errors import BrowserError, BrowserStuckError, ConfigError
from .deadline import on_wait_over, session_browser, within
from .devtools import devtools_for
from .guard import NavigationGuard
from .hardening import hardening_refusal
from .launcher import killed_frozen, open_browser
from .session import BrowserSession

__all__ = ["LAUNCH_TRIES", "OPENS_AT_ONCE", "SESSION_TRIES", "BrowserPool", "PooledBrowser"]

log = structlog.get_logger("webagent.browser")

#: Browsers a new session tries when the one it was given died before the session was opened.
SESSION_TRIES = 3
#: Launches of a replacement browser before its error is raised (a first launch is tried once).
LAUNCH_TRIES = 3
#: Sessions a browser opens at once (contexts and their first tab); the others wait their turn.
OPENS_AT_ONCE = 8
#: Seconds a failed session open waits for the driver to report that its browser disconnected.
DISCONNECT_WAIT_S = 2.0
_LAUNCH_RETRY_S = 0.5


class _Retired(Exception):
    """The browser was retired while a session waited to open on it."""


@dataclass(eq=False)
class _Slot:
    browser: Browser
    owned: bool
    hardened: bool = False
    active: int = 0
    served: int = 0
    dead: bool = False
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # set when the browser disconnected
    opening: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(OPENS_AT_ONCE))

    @property
    def retiring(self) -> bool:
        return self.dead or not self.browser.is_connected()

    async def died(self, wait_s: float) -> bool:
        """Whether the browser is gone, waiting up to ``wait_s`` for the driver to say so."""
        if not self.browser.is_connected() or self.gone.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await self.gone.wait()
        return not self.browser.is_connected() or self.gone.is_set()

    async def unless_gone(self, opening: Coroutine[Any, Any, BrowserSession]) -> BrowserSession:
        """``opening``, given up (BrowserError) as soon as the browser disconnects: a call pending on
        a browser killed under it (a lost host) may otherwise wait out its whole deadline."""
        task = asyncio.ensure_future(opening)
        gone = asyncio.ensure_future(self.gone.wait())
        try:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not task.done():
                task.cancel()  # its own clean-up runs, on a browser that is gone: waited for briefly
                await asyncio.wait([task], timeout=DISCONNECT_WAIT_S)
        if not task.done() or task.cancelled():
            task.add_done_callback(lambda t: t.cancelled() or t.exception())  # its end, never reported
            raise BrowserError("the browser went away while the session opened")
        return task.result()


#: One browser of a pool with its sessions (what a pool's subclass, the fleet's, places sessions on).
PooledBrowser = _Slot


class BrowserPool:
    """Hands out browser sessions; launches, recycles and replaces browsers as needed."""

    #: Launches of a replacement browser before its error is raised (the fleet pool tries another host).
    launch_tries = LAUNCH_TRIES

    def __init__(self, config: BrowserConfig, *, browser: Browser | None = None) -> None:
        self.config = config
        self._playwright: Playwright | None = None
        self._slots: list[_Slot] = []
        self._lock = asyncio.Lock()
        self.launched = 0
        self.crashes = 0
        self.stuck = 0  # browsers retired because they did not answer opening a session
        self.open_sessions = 0  # sessions opened and not closed yet (for monitoring)
        #: Sessions waiting for their turn to open (``OPENS_AT_ONCE`` at a time a browser): a batch's
        #: admission holds new sessions back while more wait than the browsers open.
        self.waiting_to_open = 0
        self.disconnect_wait_s = DISCONNECT_WAIT_S
        if browser is not None:
            self._watch(_Slot(browser, owned=False))

    @property
    def browsers(self) -> int:
        return sum(1 for s in self._slots if not s.retiring)

    def launches_next(self, *, hardened: bool = False) -> bool:
        """Whether the next session (of that kind) launches a browser (none running can take it)."""
        return self._free(hardened) is None

    def _free(self, hardened: bool) -> _Slot | None:
        """A browser that can take one more session of that kind now."""
        limit, life = self.config.contexts_per_browser, self.config.recycle_after
        for slot in self._slots:
            fresh = slot.owned is False or slot.served < life
            kind = slot.owned is False or slot.hardened == hardened
            if not slot.retiring and fresh and kind and slot.active < limit:
                return slot
        return None

    async def _acquire(self, *, hardened: bool = False) -> _Slot:
        async with self._lock:
            slot = self._free(hardened)
            if slot is None:
                slot = await self._launch(hardened=hardened)
            slot.active += 1
            slot.served += 1
            return slot

    async def _launch(self, *, hardened: bool) -> _Slot:
        """A new browser, up and connected (called under the lock: one launch at a time)."""
        # Not in the launching run's context: the driver's and the DevTools reader's tasks made
        # here serve every session of the browser, and must not report progress as that run's.
        token = on_wait_over.set(None)
        try:
            return await self._launch_browser(hardened)
        finally:
            on_wait_over.reset(token)

    async def _launch_browser(self, hardened: bool) -> _Slot:
        if self._playwright is None:
            self._playwright = await async_playwright().start()
        tries = self.launch_tries if self.launched else 1
        for attempt in range(1, tries + 1):
            try:
                browser = await self._open(self._playwright, hardened)
                if not browser.is_connected():
                    with contextlib.suppress(Exception):
                        await within(browser.close(), self.config.open_timeout_s, "browser.close")
                    raise BrowserError("the browser exited right after it was launched")
            except BrowserError as exc:
                if attempt == tries:
                    raise
                log.warning("browser_launch_retry", attempt=attempt, error=str(exc))
                await asyncio.sleep(_LAUNCH_RETRY_S * attempt)
                continue
            slot = self._watch(_Slot(browser, owned=True, hardened=hardened))
            self.launched += 1
            return slot
        raise AssertionError("unreachable")  # pragma: no cover

    async def _open(self, playwright: Playwright, hardened: bool) -> Browser:
        """A new browser: launched here, or connected to the configured remote one, which, for
        guarded sessions, must show the guard's hardening (else a ConfigError: the run refuses)."""
        browser = await open_browser(playwright, self.config, hardened=hardened)
        if hardened and self.config.remote:
            refusal = await hardening_refusal(browser, self.config)
            if refusal is not None:
                with contextlib.suppress(Exception):
                    await within(browser.close(), self.config.open_timeout_s, "browser.close")
                raise ConfigError(
                    f"the remote browser at {self.config.remote} cannot promise the navigation guard: {refusal}; "
                    "or run without a navigation guard on it (docs/security.md)"
                )
        return browser

    def _watch(self, slot: _Slot) -> _Slot:
        slot.browser.on("disconnected", lambda _: self._on_disconnected(slot))
        self._slots.append(slot)
        return slot

    def _on_disconnected(self, slot: _Slot) -> None:
        slot.gone.set()
        if not slot.dead and killed_frozen(slot.browser):  # it answered nothing, so it was ended: not a crash
            slot.dead = True
            self.stuck += 1
            log.warning("browser_retired_frozen", active_sessions=slot.active)
        if not slot.dead:
            slot.dead = True
            self.crashes += 1
            log.warning("browser_disconnected", active_sessions=slot.active)

    async def _release(self, slot: _Slot) -> None:
        slot.active -= 1
        if slot.active == 0 and slot.retiring and slot in self._slots:
            self._slots.remove(slot)  # a dead browser (of ours or not) is never handed out again
        if slot.owned and slot.active == 0 and (slot.dead or slot.served >= self.config.recycle_after):
            if slot in self._slots:
                self._slots.remove(slot)
            slot.dead = True  # closing on purpose is not a crash
            with contextlib.suppress(Exception):
                await within(slot.browser.close(), self.config.open_timeout_s, "browser.close")

    async def start(self, *, hardened: bool = False) -> None:
        """Launch the first browser now, so a bad executable is one error up front, not one per task
        (``hardened``: the kind guarded sessions get)."""
        slot = await self._acquire(hardened=hardened)
        slot.served -= 1  # warming up is not serving a context
        await self._release(slot)

    async def devices(self) -> Mapping[str, Mapping[str, Any]]:
        """Playwright's device registry (``playwright.devices``: ``"iPhone 15"``, ``"Pixel 7"``, ...)."""
        if self._playwright is None:
            self._playwright = await within(async_playwright().start(), self.config.open_timeout_s, "playwright.start")
        return self._playwright.devices

    @contextlib.asynccontextmanager
    async def session(
        self,
        *,
        guard: NavigationGuard | None = None,
        on_queue: Callable[[bool], None] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[BrowserSession]:
        """A new context on a pooled browser, closed on exit. ``guard``: the navigation guard the
        session will get (``set_guard``): a hardened browser, and a context made for it;
        ``options``: more ``new_context`` options (``webagent.browser.context``: the session settings).

        ``on_queue(True)`` is called while the session waits for its turn to open (behind the
        ``OPENS_AT_ONCE`` opening on its browser, each within its own deadline), ``on_queue(False)``
        once it opens: a batch's watchdog does not count that wait as a stall.
        """
        hardened = guard is not None and guard.active
        first = await self._acquire(hardened=hardened)
        slot: _Slot | None = first
        token = session_browser.set(devtools_for(first.browser))  # whether it answers, while commands wait
        try:
            tries = 1
            while True:
                assert slot is not None
                session_browser.set(devtools_for(slot.browser))
                try:
                    # A few opens at a time per browser: hundreds at once would all wait on
                    # Chromium's one UI thread, and the deadline would measure that queue.
                    if on_queue is not None:
                        on_queue(True)
                    async with self._turn(slot):
                        if on_queue is not None:
                            on_queue(False)
                        if slot.retiring:
                            raise _Retired
                        session = await slot.unless_gone(
                            BrowserSession.create(slot.browser, self.config, guard=guard, options=options)
                        )
                    break
                except _Retired:
                    pass  # retired while this session waited its turn: another browser, not a try
                except BrowserError as exc:
                    # The browser may have died a moment ago, its disconnect not reported yet; or
                    # it is alive but does not answer (frozen): it is retired all the same (its
                    # sessions end on their own deadlines) and closed once they have.
                    stuck = isinstance(exc, BrowserStuckError)
                    if stuck and not slot.dead:
                        slot.dead = True
                        self.stuck += 1
                    if tries >= SESSION_TRIES or not (stuck or await slot.died(self.disconnect_wait_s)):
                        raise
                    log.warning("browser_died_before_session", tries=tries, error=str(exc), stuck=stuck)
                    tries += 1
                    slot.dead = True
                released, slot = slot, None
                await self._release(released)
                slot = await self._acquire(hardened=hardened)
            self.open_sessions += 1
            try:
                yield session
            finally:
                self.open_sessions -= 1
                await session.close()
                if session.browser_stuck and slot is not None and not slot.dead:  # frozen: retired
                    slot.dead = True
                    self.stuck += 1
                    log.warning("browser_retired_frozen", active_sessions=slot.active)
        finally:
            if slot is not None:
                await self._release(slot)
            with contextlib.suppress(ValueError):  # closed from another context: nothing to unset here
                session_browser.reset(token)

    @contextlib.asynccontextmanager
    async def _turn(self, slot: _Slot) -> AsyncIterator[None]:
        """A session's turn to open on ``slot`` (``OPENS_AT_ONCE`` at a time), counted while it waits."""
        self.waiting_to_open += 1
        try:
            await slot.opening.acquire()
        finally:
            self.waiting_to_open -= 1
        try:
            yield
        finally:
            slot.opening.release()

    async def aclose(self) -> None:
        for slot in list(self._slots):  # runs cancelled a moment ago may still release theirs
            if slot.owned:
                slot.dead = True
                with contextlib.suppress(Exception):
                    await within(slot.browser.close(), self.config.open_timeout_s, "browser.close")
        self._slots.clear()
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await within(self._playwright.stop(), self.config.open_timeout_s, "playwright.stop")
            self._playwright = None
