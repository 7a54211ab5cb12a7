"""How a browser session copes with pages that misbehave (mixed into ``BrowserSession``).

None of these hangs a run or costs a round trip on the normal path; each becomes an event the
policy reads in its next observation:

* **download** — the context does not accept downloads, so Chromium cancels it; reported, and a
  settle waiting for the navigation the download link asked for stops waiting at once;
* **file chooser** — intercepted on the session's own CDP session, which every action sets up
  first (a chooser needs a user gesture, so none opens before an action), and left unanswered,
  which dismisses it; reported (the agent cannot pick files). Chromium announces it while the
  click is handled, before the input is acknowledged, so in practice the event is in before
  settle's check answers;
* **failed navigation** (a redirect loop, a refused connection) started by an action — Chromium
  shows its error page; reported with the network error. A failed ``goto`` is an ActionError
  instead, and waits for that error page so that the next navigation is not cancelled by it;
* **renderer crash** — the page is replaced by a fresh tab in the same context, reopened at the
  URL it had (reported), before the next screenshot; an action attempted on the crashed page is
  an ActionError. After ``MAX_PAGE_CRASHES`` reopenings — or at the first crash of a page the
  session does not own (a caller's page) — the run ends with a BrowserError.

Dialogs (``beforeunload`` included) are accepted and pages that never finish loading are capped
by the session itself (``BrowserSession._on_dialog`` and ``settle``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from playwright.async_api import BrowserContext, Download, Page, Request
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from ..config import BrowserConfig
from ..errors import BrowserError
from .deadline import within
from .devtools import CDPChannel

__all__ = ["MAX_PAGE_CRASHES", "PageFaults", "first_line"]

log = structlog.get_logger("webagent.browser")

MAX_PAGE_CRASHES = 3  # renderer crashes a session recovers from by reopening the page
ERROR_PAGE_WAIT_S = 1.0  # how long a failed goto waits for Chromium's error page to commit
#: A navigation that turns into a download is aborted a few ms before Chromium announces the
#: download: after an aborted navigation, settle waits this long at most for the announcement
#: (or for another navigation's commit) so the step reports it.
ABORT_GRACE_S = 0.5


class PageFaults:
    """Handlers for downloads, file choosers, failed navigations and renderer crashes."""

    # Provided by BrowserSession.
    page: Page
    context: BrowserContext
    config: BrowserConfig
    _events: list[str]
    _new_pages: list[Page]
    _cdp: CDPChannel | None
    _nav_committed: asyncio.Event
    _nav_aborted: bool
    _abort_resolved: asyncio.Event  # after an aborted navigation: a download began, or a page committed
    _error_page_committed: asyncio.Event
    _owns_context: bool
    _owns_page: bool
    _crashed: bool
    _crashes: int
    _nav_failure: str | None

    def _watch(self, page: Page) -> None:
        raise NotImplementedError

    def _invalidate_view(self) -> None:
        raise NotImplementedError

    async def _watch_navigations(self) -> None:
        """Attach the navigation guard's interception to the current page (no-op without a guard)."""
        raise NotImplementedError

    def _watch_faults(self, page: Page) -> None:
        page.on("crash", self._on_crash)
        page.on("download", self._on_download)
        page.on("requestfailed", self._on_request_failed)

    # -- events ---------------------------------------------------------------------------
    def _navigation_settled(self) -> None:
        """The navigation settle may be waiting for has committed, or never will (a download, a crash,
        a guard block): end both the wait for its commit and the grace for a late download."""
        self._nav_committed.set()
        self._abort_resolved.set()

    def _on_crash(self, page: Page) -> None:
        if page is self.page:
            self._crashed = True
            self._navigation_settled()
            log.warning("page_crashed", url=page.url)

    def _on_download(self, download: Download) -> None:
        # A link to a file asked for a navigation that will never commit: end the wait for it.
        self._navigation_settled()
        name = download.suggested_filename or "a file"
        self._events.append(
            f"The page started a download of {name!r} ({download.url}); downloads are not kept, so it was cancelled."
        )

    def _on_file_chooser(self, params: dict[str, Any]) -> None:
        # Page.fileChooserOpened on our CDP session, which intercepts choosers (see _cdp_session).
        several = " (several files)" if params.get("mode") == "selectMultiple" else ""
        self._events.append(f"A file chooser opened{several}; the agent cannot upload files, so it was dismissed.")

    def _on_request_failed(self, request: Request) -> None:
        try:
            if not (request.is_navigation_request() and request.frame == self.page.main_frame):
                return
        except PlaywrightError:
            return
        failure = request.failure or "unknown error"
        if "ERR_ABORTED" in failure:  # replaced by another navigation, or a download: nothing commits
            self._nav_aborted = True
            self._nav_committed.set()
        else:  # Chromium's error page commits next (and ends a settle's wait)
            self._nav_failure = f"Opening {request.url} failed: {failure}."

    async def _after_failed_goto(self, exc: PlaywrightError) -> None:
        """Let the error page of a failed goto commit, so that it cannot cancel the next navigation."""
        text = str(exc)
        if "net::ERR_" in text and "ERR_ABORTED" not in text:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ERROR_PAGE_WAIT_S):
                    await self._error_page_committed.wait()

    # -- crashes --------------------------------------------------------------------------
    async def _reopen_after_crash(self) -> None:
        """Replace the crashed page by a fresh tab at the same URL (BrowserError past the limit)."""
        url = self.page.url
        if not (self._owns_context or self._owns_page):
            raise BrowserError(f"the page crashed (its renderer process died) at {url}")
        while True:
            self._crashes += 1
            if self._crashes > MAX_PAGE_CRASHES:
                raise BrowserError(
                    f"the page crashed {self._crashes} times (its renderer process died) at {url}; giving up"
                )
            try:
                note = await self._reopen(url)
                break
            except BrowserError as exc:  # the new tab's renderer died too, or never answered: once more
                browser = self.context.browser
                if browser is not None and not browser.is_connected():
                    raise
                log.warning("page_reopen_failed", url=url, error=str(exc))
        self._events.append(
            f"The page crashed (its renderer process died); the agent reopened {url} in a new tab{note}."
        )

    async def _replaced_after_crash_in_load(self, exc: PlaywrightError) -> bool:
        """After a failed page load: whether the page's renderer died during it and the page was
        replaced by a fresh tab (the load is then tried again), within ``MAX_PAGE_CRASHES``."""
        if not (self._owns_context or self._owns_page) or self._crashes >= MAX_PAGE_CRASHES:
            return False
        if not self._crashed and ("ERR_ABORTED" in str(exc) or "crashed" in str(exc)):
            # The driver may report the crash a moment after the navigation's failure.
            with contextlib.suppress(PlaywrightError):
                await within(self.page.wait_for_event("crash", timeout=1000), 2.0, "waiting for a crash")
        browser = self.context.browser
        if not self._crashed or browser is None or not browser.is_connected():
            return False
        self._crashes += 1
        log.warning("page_crashed_while_loading", url=self.page.url, error=first_line(exc))
        await self._replace_page()
        return True

    async def _reopen(self, url: str) -> str:
        """A fresh tab in place of the page, at ``url``; what went wrong loading it ("" if nothing)."""
        await self._replace_page()
        await self._watch_navigations()
        if not url.startswith(("http:", "https:")):
            return ""
        try:
            await self._load(url)
        except PlaywrightTimeoutError:
            return f"; it was still loading after {self.config.navigation_timeout_s:g} s"
        except PlaywrightError as exc:
            return f"; reopening it failed: {first_line(exc).removeprefix('Page.goto: ')}"
        return ""

    async def _load(self, url: str) -> None:
        """``page.goto`` until ``load``: Playwright's own timeout, and ours in case the browser stops
        answering Playwright too."""
        timeout_s = self.config.navigation_timeout_s
        await within(
            self.page.goto(url, wait_until="load", timeout=timeout_s * 1000),
            timeout_s + self.config.command_timeout_s,
            "Page.goto",
        )

    async def _replace_page(self) -> None:
        """Swap the crashed page for a fresh blank one in the same context."""
        crashed = self.page
        timeout_s = self.config.open_timeout_s
        try:
            page = await within(self.context.new_page(), timeout_s, "new_page")
        except PlaywrightError as exc:
            raise BrowserError(f"cannot open a new tab in place of the page: {first_line(exc)}") from None
        self._new_pages = [p for p in self._new_pages if p is not page]  # not a tab the page opened
        with contextlib.suppress(PlaywrightError):
            await within(crashed.close(), timeout_s, "page.close")
        self.page = page
        self._cdp = None
        self._crashed = False
        self._invalidate_view()
        self._nav_committed.clear()
        self._watch(page)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (Playwright appends call logs)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
