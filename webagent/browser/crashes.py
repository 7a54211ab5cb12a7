"""Which browser failures are crashes: what the run needed of the browser is gone.

A renderer that died, a page or context closed under the run, a browser that disconnected: Playwright
and the DevTools channel say so in their errors' words (``DEAD_TARGET``), and the session knows it
from its own state (the page closed, its ``crash`` event, the browser's disconnect). Wherever a
browser call fails in a session's life -- opening the context, installing the navigation guard,
the first navigation, a step's screenshot or action, the final screenshot, saving the signed-in
state -- ``browser_failure`` names the error: a ``BrowserCrashError`` for a crash, a
``BrowserTimeoutError`` for a command past its deadline, both infrastructure failures (never the
task's verdict: a batch re-runs the task), and a plain ``BrowserError`` for anything else.
docs/faults.md tables what each phase makes of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from ..errors import BrowserCrashError, BrowserError, BrowserTimeoutError
from .deadline import CommandTimeout

__all__ = [
    "CRASH_PROBE_AFTER_S",
    "DEAD_TARGET",
    "browser_failure",
    "crashed_already",
    "dead_target",
    "first_line",
    "unless_crashed",
]

T = TypeVar("T")

#: Seconds opening a CDP session on a page (or its first command) waits before the page is asked
#: whether its renderer died already: a crash not reported yet (a renderer killed as the session set
#: up), or to no one watching (a caller's page that crashed between two calls).
CRASH_PROBE_AFTER_S = 3.0
_PROBE_S = 5.0

#: How Playwright, Chromium and the DevTools channel word a target that is gone (lower case).
DEAD_TARGET = (
    "target crashed",
    "page crashed",
    "has been closed",  # "Target page, context or browser has been closed", "Browser has been closed"
    "target closed",
    "session closed",
    "browser closed",
    "browser has disconnected",
    "browser disconnected",
    "connection closed",
    "websocket closed",
    "the page has closed",
)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (Playwright appends call logs)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def dead_target(exc: BaseException) -> bool:
    """Whether ``exc`` says that the page, its renderer, its context or the browser is gone."""
    text = first_line(exc).lower()
    return any(words in text for words in DEAD_TARGET)


def browser_failure(exc: BaseException, doing: str, *, dead: bool = False) -> BrowserError:
    """The error of a browser call that failed while ``doing`` ("cannot take a screenshot"):
    BrowserTimeoutError past its deadline, BrowserCrashError when its target is gone (``dead``: the
    caller knows it is, from the session's state), else BrowserError."""
    text = f"{doing}: {first_line(exc)}"
    if isinstance(exc, CommandTimeout):
        return BrowserTimeoutError(text)
    if dead or dead_target(exc):
        return BrowserCrashError(text)
    return BrowserError(text)


async def unless_crashed(opening: Awaitable[T], crash: asyncio.Event, doing: str, *, page: Page | None = None) -> T:
    """``await opening``, or a PlaywrightError ("Target crashed") as soon as ``crash`` is set: a target
    whose renderer died may never answer (attaching to one waited out its whole deadline, 30 s).
    ``page``: when ``opening`` takes longer than ``CRASH_PROBE_AFTER_S``, ask it whether its renderer
    died already (``crashed_already``: a crash not reported yet, or to no one watching); if so,
    ``crash`` is set."""
    task = asyncio.ensure_future(opening)
    waiter = asyncio.ensure_future(crash.wait())
    try:
        pending = {task, waiter}
        if page is not None:
            done, _ = await asyncio.wait(pending, timeout=CRASH_PROBE_AFTER_S, return_when=asyncio.FIRST_COMPLETED)
            if not done and await crashed_already(page):
                crash.set()
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise PlaywrightError(f"{doing}: Target crashed")
    return task.result()


async def crashed_already(page: Page) -> bool:
    """Whether ``page``'s renderer died before anything of ours watched it: Playwright, which saw it,
    answers a script on a crashed page at once ("Target crashed"), where a CDP command sent to its
    target is never answered. False if the page answers, or does not within a few seconds (busy)."""
    try:
        async with asyncio.timeout(_PROBE_S):
            await page.evaluate("0")
    except PlaywrightError as exc:
        return "target crashed" in first_line(exc).lower()
    except TimeoutError:
        return False
    return False
