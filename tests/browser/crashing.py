"""Crashing a page's renderer on purpose, at a chosen phase of a session's life.

The crash is real: CDP ``Page.crash`` (which never answers) kills the page's renderer process, and
Chromium and Playwright report it as they would a renderer the OS killed. The phase is chosen by a
hook on webagent's own code (the session's set-up, its screenshot, ...), never on Playwright's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from playwright.async_api import Page

from webagent.browser.guard import NavigationGuard
from webagent.browser.state import PageState

__all__ = ["crash_at_set_up", "crash_page", "hook_before"]


async def crash_page(page: Page) -> None:
    """Kill ``page``'s renderer; returns once Playwright has reported the crash."""
    cdp = await page.context.new_cdp_session(page)
    crashed = asyncio.ensure_future(page.wait_for_event("crash", timeout=10_000))
    sent = asyncio.ensure_future(cdp.send("Page.crash"))
    try:
        await crashed
    finally:
        sent.cancel()
        await asyncio.gather(sent, return_exceptions=True)


def crash_at_set_up(monkeypatch: pytest.MonkeyPatch, times: int = 1) -> list[str]:
    """The renderer of the next ``times`` sessions' first tab dies as their navigation guard is being
    installed (issue 43's ``Page.enable: Target crashed``); the URLs crashed are listed as it happens."""
    crashed: list[str] = []
    install = PageState.set_guard

    async def set_guard(self: PageState, guard: NavigationGuard) -> None:
        if len(crashed) < times:
            crashed.append(self.page.url)
            await crash_page(self.page)
        await install(self, guard)

    monkeypatch.setattr(PageState, "set_guard", set_guard)
    return crashed


def hook_before(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, hook: Callable[[Any, int], Awaitable[None]]
) -> None:
    """Run ``hook(self, n)`` before each call of ``owner.name`` (``n``: 1 for the first call)."""
    original = getattr(owner, name)
    calls = [0]

    async def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        await hook(self, calls[0])
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, hooked)
