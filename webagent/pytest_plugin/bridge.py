"""Running webagent (async) on the page of a sync Playwright test: pytest-playwright's ``page``.

How Playwright's sync API works: ``sync_playwright()`` creates an asyncio event loop and runs it in
a greenlet of its own, the dispatcher fiber. Each sync call (``page.click(...)``) wraps the impl
object's coroutine in a task on that loop (``SyncBase._sync``) and switches to the fiber until the
task is done; event listeners and route handlers run in greenlets of their own and may return
awaitables, which the loop awaits. Between calls the test's thread marks that loop as running,
so neither ``asyncio.run`` nor a second loop can be used there.

So webagent runs on Playwright's own loop: ``run(page, coroutine)`` is ``page._sync(coroutine)``,
the very path every sync call takes, with a deadline around it. The coroutine drives the async
API wrapper of the same impl object (``async_page``). One thing must be kept apart: Playwright
caches the API wrapper of an impl object on the object itself (one attribute shared by the sync
and the async mappings), so the first wrapper made would be handed to both sides: the test's
``page.mouse`` could come back as an async ``Mouse``, or the agent's ``page.context`` as a sync
one. ``install()`` gives the async mapping an attribute of its own for impl objects of a sync
connection (those with a dispatcher fiber); objects of async connections, the only ones it ever
sees otherwise, are untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

from playwright.async_api import Page as AsyncPage
from playwright.sync_api import Page as SyncPage

from ..errors import BrowserError, DeadlineExceeded

__all__ = ["async_page", "bounded", "install", "run"]

T = TypeVar("T")

#: Where the async API wrapper of a sync connection's impl object is kept.
ASYNC_API_ATTR = "_webagent_async_api_"
_PATCHED = "_webagent_sync_bridge"


def install() -> None:
    """Give Playwright's async mapping its own wrapper cache for sync-connection objects (idempotent)."""
    try:
        from playwright._impl import _async_base

        mapping: Any = _async_base.mapping
        registry: dict[type, type] = mapping._mapping
        original = mapping.from_maybe_impl
    except (ImportError, AttributeError) as exc:
        raise BrowserError(
            f"this Playwright version cannot run webagent on a sync page ({exc}); "
            "use pytest-playwright-asyncio and an async test, or another Playwright version"
        ) from None
    if getattr(mapping, _PATCHED, False):
        return

    def from_maybe_impl(obj: Any, visited: Any = None) -> Any:
        if not obj or isinstance(obj, dict | list) or not getattr(obj, "_dispatcher_fiber", None):
            return original(obj, visited)
        api_class = registry.get(getattr(obj, "_api_impl_class", type(obj)))
        if api_class is None:
            return obj
        api = getattr(obj, ASYNC_API_ATTR, None)
        if api is None:
            api = api_class(obj)
            setattr(obj, ASYNC_API_ATTR, api)
        return api

    mapping.from_maybe_impl = from_maybe_impl
    setattr(mapping, _PATCHED, True)


def async_page(page: SyncPage) -> AsyncPage:
    """The async API of the same page (same impl object, same connection and event loop)."""
    install()
    from playwright._impl import _async_base

    impl = getattr(page, "_impl_obj", None)
    if impl is None or not getattr(impl, "_dispatcher_fiber", None):
        raise BrowserError(f"not a page of Playwright's sync API: {page!r}")
    return cast(AsyncPage, _async_base.mapping.from_impl(impl))


async def bounded(coroutine: Coroutine[Any, Any, T], timeout_s: float, what: str) -> T:
    """``await coroutine``, cancelled with ``DeadlineExceeded`` after ``timeout_s`` (a TimeoutError
    of its own passes through)."""
    __tracebackhide__ = True
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            return await coroutine
    except TimeoutError:
        if deadline.expired():
            raise DeadlineExceeded(f"{what} did not end within {timeout_s:g} s") from None
        raise


def run(owner: Any, coroutine: Coroutine[Any, Any, T], *, timeout_s: float, what: str) -> T:
    """Run ``coroutine`` to its end on the event loop of ``owner`` (a sync API object: the page,
    or pytest-playwright's ``playwright``), from the test's greenlet; ``DeadlineExceeded`` after
    ``timeout_s``. Ctrl-C or pytest-timeout cancels it, as they cancel a sync call."""
    __tracebackhide__ = True
    sync = getattr(owner, "_sync", None)
    if sync is None:
        coroutine.close()
        raise BrowserError(f"not an object of Playwright's sync API: {owner!r}")
    return cast(T, sync(bounded(coroutine, timeout_s, what)))
