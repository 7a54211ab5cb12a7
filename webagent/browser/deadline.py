"""Deadlines for everything the agent awaits from the browser.

Chromium may never answer a command: a screenshot whose frame never comes, a page whose main
thread spins, a browser that stopped reading its pipe. Playwright bounds only the calls that take
a ``timeout`` (navigations, waits for a state or an event); its mouse, keyboard, ``evaluate``,
``new_page`` and ``close`` wait as long as the browser does, and so would a raw CDP command. Every
such await in ``webagent.browser`` goes through ``within`` (or a CDP channel that bounds each
command itself, ``webagent.browser.devtools``), so a browser that stops answering costs a
deadline, never a hung session. A command past its deadline raises ``CommandTimeout``, a
Playwright ``TimeoutError``, which every caller already handles as "the page did not respond".

A bounded wait that ends, answered or past its deadline, is progress (``waited``): a batch's
watchdog looks for runs stuck in an unbounded wait, not for slow browsers on a loaded machine,
whose commands keep ending (each within its deadline) while a step takes long.

Where a batch measures the load (``browser_load``, a ``BrowserLoad``), every answer is measured,
and a command past its deadline on a saturated machine gets more time (``BrowserLoad.grace``: at
most ``MAX_SCALE`` deadlines in all), while one that nothing suggests will still come fails at its
deadline as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from playwright.async_api import CDPSession
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from .load import Answers, BrowserLoad

__all__ = [
    "DEFAULT_COMMAND_TIMEOUT_S",
    "BoundedCDPSession",
    "CommandTimeout",
    "browser_load",
    "on_wait_over",
    "session_browser",
    "waited",
    "within",
]

T = TypeVar("T")

#: Deadline of one browser command where no configuration is at hand (``browser.command_timeout_s``).
DEFAULT_COMMAND_TIMEOUT_S = 15.0


#: Called when a bounded browser wait of the current run ends (set per run task: ``RunStream``).
on_wait_over: ContextVar[Callable[[], None] | None] = ContextVar("webagent_on_wait_over", default=None)
#: Measures every answer and judges every deadline that passes (set by a batch for all its tasks).
browser_load: ContextVar[BrowserLoad | None] = ContextVar("webagent_browser_load", default=None)
#: The answers of the browser the current run's session is on (set by the pool), where it counts
#: them: a command past its deadline whose browser has answered nothing since it was sent is not
#: given more time, however busy the machine.
session_browser: ContextVar[Answers | None] = ContextVar("webagent_session_browser", default=None)


class CommandTimeout(PlaywrightTimeoutError):
    """A browser command that was not answered within its deadline."""


def waited() -> None:
    """A bounded wait of this run ended (answered or past its deadline): tell ``on_wait_over``."""
    hook = on_wait_over.get()
    if hook is not None:
        hook()


async def within(awaitable: Awaitable[T], seconds: float, what: str) -> T:
    """``await awaitable``, or CommandTimeout after ``seconds`` (the awaitable is cancelled); where
    the load is measured, after more on a saturated machine (``BrowserLoad.grace``)."""
    load = browser_load.get()
    if load is not None:
        return await _within_load(awaitable, seconds, what, load)
    try:
        async with asyncio.timeout(seconds):
            result = await awaitable
    except TimeoutError:
        waited()
        raise CommandTimeout(f"{what}: no answer from the browser within {seconds:g} s") from None
    except PlaywrightError:
        waited()
        raise
    waited()
    return result


async def _within_load(awaitable: Awaitable[T], seconds: float, what: str, load: BrowserLoad) -> T:
    loop = asyncio.get_running_loop()
    started = load.now()
    browser = session_browser.get()
    replies = browser.replies if browser is not None else 0
    handle: asyncio.TimerHandle | None = None
    try:
        async with asyncio.timeout(None) as scope:

            def judge() -> None:  # the deadline passed: more time, or the timeout now
                nonlocal handle
                answered = None if browser is None else browser.replies > replies
                more = load.grace(started, seconds, browser_answered=answered)
                if more > 0:
                    handle = loop.call_later(more, judge)
                else:
                    scope.reschedule(loop.time())

            handle = loop.call_later(seconds, judge)
            result = await awaitable
    except TimeoutError:
        waited_s = load.now() - started
        load.expire(waited_s, seconds)
        waited()
        more = f" (waited {waited_s:.0f} s: the machine is saturated)" if waited_s >= 1.5 * seconds else ""
        raise CommandTimeout(f"{what}: no answer from the browser within {seconds:g} s{more}") from None
    except PlaywrightError:
        waited()
        raise
    finally:
        if handle is not None:
            handle.cancel()
    load.answer(load.now() - started, seconds)
    waited()
    return result


class BoundedCDPSession:
    """Playwright's ``CDPSession`` (the fallback when there is no direct DevTools connection) with
    a deadline on every command, like ``DevToolsSession``'s."""

    def __init__(self, session: CDPSession, timeout_s: float) -> None:
        self._session = session
        self.timeout_s = timeout_s

    async def send(self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> Any:
        return await within(self._session.send(method, params), timeout_s or self.timeout_s, method)

    def on(self, event: str, f: Callable[..., Any]) -> None:
        self._session.on(event, f)

    async def detach(self) -> None:
        await within(self._session.detach(), self.timeout_s, "CDPSession.detach")
