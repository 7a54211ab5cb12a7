"""How a browser session copes with pages that misbehave, and reopens a page that died.

None of these hangs a run or costs a round trip on the normal path; each becomes an event the
policy reads in its next observation:

* **dialog** (``beforeunload`` included) — accepted (a prompt with its default value); reported;
* **download** — kept or refused by ``webagent.browser.downloads`` (told either way), and a settle
  waiting for the navigation the download link asked for stops waiting at once;
* **file chooser** — intercepted on the session's own CDP session, which every action sets up
  first (a chooser needs a user gesture, so none opens before an action), and left unanswered,
  which dismisses it; reported (files are given only by the ``upload_file`` action, ``control``). Chromium announces it while the
  click is handled, before the input is acknowledged, so in practice the event is in before
  settle's check answers;
* **failed navigation** (a redirect loop, a refused connection) started by an action — Chromium
  shows its error page; reported with the network error. A failed ``goto`` is an ActionError
  instead, and waits for that error page so that the next navigation is not cancelled by it;
* **renderer crash** — the page is replaced by a fresh tab in the same context, reopened at the
  URL it had (reported), before the next screenshot; an action attempted on the crashed page is
  an ActionError. After ``MAX_PAGE_CRASHES`` reopenings — or at the first crash of a page the
  session does not own (a caller's page) — the run ends with a BrowserCrashError (the
  infrastructure's failure, never the task's: ``webagent.browser.crashes``).

Pages that never finish loading are capped by ``settle`` and by ``load`` here, the one bounded
page load of ``goto`` and of reopening a page (after a crash, or a page that gives no screenshot).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import structlog
from playwright.async_api import Dialog, Page, Request
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from ..errors import BrowserCrashError, BrowserError
from ..guard.secrets import shorten
from .crashes import browser_failure
from .deadline import within
from .state import PageState, first_line
from .tabs import TabFollower

__all__ = ["ABORT_GRACE_S", "MAX_PAGE_CRASHES", "PageFaults"]

log = structlog.get_logger("webagent.browser")

MAX_PAGE_CRASHES = 3  # renderer crashes a session recovers from by reopening the page
ERROR_PAGE_WAIT_S = 1.0  # how long a failed goto waits for Chromium's error page to commit
#: A navigation that turns into a download is aborted a few ms before Chromium announces the
#: download: after an aborted navigation, settle waits this long at most for the announcement
#: (or for another navigation's commit) so the step reports it.
ABORT_GRACE_S = 0.5


class PageFaults:
    """Dialogs, file choosers, failed navigations and renderer crashes; reopening a page."""

    def __init__(self, state: PageState, tabs: TabFollower) -> None:
        self._state = state
        self._tabs = tabs
        self._crashes = 0  # pages of this session whose renderer died (bounded by MAX_PAGE_CRASHES)
        self._choosers: list[asyncio.Future[dict[str, Any]]] = []  # upload_file waits for a chooser
        state.on_page(self._watch)
        state.on_cdp("Page.fileChooserOpened", self._on_file_chooser)

    def _watch(self, page: Page) -> None:
        listen = self._state.listen
        listen(page, "dialog", self._on_dialog)
        listen(page, "crash", self._on_crash)
        listen(page, "requestfailed", self._on_request_failed)

    # -- events ---------------------------------------------------------------------------
    async def _on_dialog(self, dialog: Dialog) -> None:
        kind = dialog.type
        message = shorten(" ".join(dialog.message.split()), 300)
        current = dialog.page is self._state.page  # settle() waits only for the current tab's dialogs
        try:
            try:
                accepted = dialog.accept(dialog.default_value) if kind == "prompt" else dialog.accept()
                await within(accepted, self._state.config.command_timeout_s, "dialog.accept")
            except PlaywrightError:
                return
            text = (
                f"A JavaScript {kind} dialog said: {message!r} (it was accepted)."
                if message
                else (f"A JavaScript {kind} dialog appeared (it was accepted).")
            )
            self._state.report(text)
        finally:
            if current:
                self._state.note_dialog_handled()  # settle() stops waiting for this dialog's report

    def _on_crash(self, page: Page) -> None:
        if self._state.note_crash(page):
            log.warning("page_crashed", url=page.url)

    @contextlib.contextmanager
    def expecting_chooser(self) -> Iterator[asyncio.Future[dict[str, Any]]]:
        """While an ``upload_file`` waits for the chooser its click opens: the chooser's
        ``Page.fileChooserOpened`` (its input's ``backendNodeId``) instead of a dismissal."""
        waiting: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._choosers.append(waiting)
        try:
            yield waiting
        finally:
            self._choosers.remove(waiting)

    def _on_file_chooser(self, params: dict[str, Any]) -> None:
        # Page.fileChooserOpened on the session's CDP session, which intercepts choosers (PageState._set_up).
        waiting = next((f for f in self._choosers if not f.done()), None)
        if waiting is not None:
            waiting.set_result(params)
            return
        several = " (several files)" if params.get("mode") == "selectMultiple" else ""
        self._state.report(
            f"A file chooser opened{several} and was dismissed; to upload an allowed file, use upload_file."
        )

    def _on_request_failed(self, request: Request) -> None:
        try:
            if not (request.is_navigation_request() and request.frame == self._state.page.main_frame):
                return
        except PlaywrightError:
            return
        failure = request.failure or "unknown error"
        if "ERR_ABORTED" in failure:  # replaced by another navigation, or a download: nothing commits
            self._state.nav.abort()
        else:  # Chromium's error page commits next (and ends a settle's wait)
            text = f"Opening {request.url} failed: {failure}."
            if not self._state.nav.fail(text):  # no wait to report it: the next observation does
                self._state.report(text)

    async def after_failed_goto(self, exc: PlaywrightError) -> None:
        """Let the error page of a failed goto commit, so that it cannot cancel the next navigation."""
        text = str(exc)
        if "net::ERR_" in text and "ERR_ABORTED" not in text:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ERROR_PAGE_WAIT_S):
                    await self._state.nav.error_page_committed.wait()

    # -- crashes --------------------------------------------------------------------------
    async def reopen_after_crash(self) -> None:
        """Replace the crashed page by a fresh tab at the same URL (BrowserCrashError past the limit)."""
        url = self._state.page.url
        if not self._state.recovers:
            raise BrowserCrashError(f"the page crashed (its renderer process died) at {url}")
        while True:
            self._crashes += 1
            if self._crashes > MAX_PAGE_CRASHES:
                raise BrowserCrashError(
                    f"the page crashed {self._crashes} times (its renderer process died) at {url}; giving up"
                )
            try:
                note = await self.reopen(url)
                break
            except BrowserError as exc:  # the new tab's renderer died too, or never answered: once more
                browser = self._state.context.browser
                if browser is not None and not browser.is_connected():
                    raise
                log.warning("page_reopen_failed", url=url, error=str(exc))
        self._state.report(
            f"The page crashed (its renderer process died); the agent reopened {url} in a new tab{note}."
        )

    async def replaced_after_crash_in_load(self, exc: PlaywrightError) -> bool:
        """After a failed page load: whether the page's renderer died during it and the page was
        replaced by a fresh tab (the load is then tried again), within ``MAX_PAGE_CRASHES``."""
        state = self._state
        if not state.recovers or self._crashes >= MAX_PAGE_CRASHES:
            return False
        if not state.crashed and ("ERR_ABORTED" in str(exc) or "crashed" in str(exc)):
            # The driver may report the crash a moment after the navigation's failure.
            with contextlib.suppress(PlaywrightError):
                await within(state.page.wait_for_event("crash", timeout=1000), 2.0, "waiting for a crash")
        browser = state.context.browser
        if not state.crashed or browser is None or not browser.is_connected():
            return False
        self._crashes += 1
        log.warning("page_crashed_while_loading", url=state.page.url, error=first_line(exc))
        await self.replace_page()
        return True

    async def reopen(self, url: str) -> str:
        """A fresh tab in place of the page, at ``url``; what went wrong loading it ("" if nothing)."""
        await self.replace_page()
        await self._state.watch_navigations()
        if not url.startswith(("http:", "https:")):
            return ""
        try:
            await self.load(url)
        except PlaywrightTimeoutError:
            return f"; it was still loading after {self._state.config.navigation_timeout_s:g} s"
        except PlaywrightError as exc:
            return f"; reopening it failed: {first_line(exc).removeprefix('Page.goto: ')}"
        return ""

    async def load(self, url: str) -> None:
        """``page.goto`` until ``load``: Playwright's own timeout, and ours in case the browser stops
        answering Playwright too."""
        config = self._state.config
        timeout_s = config.navigation_timeout_s
        await within(
            self._state.page.goto(url, wait_until="load", timeout=timeout_s * 1000),
            timeout_s + config.command_timeout_s,
            "Page.goto",
        )

    async def replace_page(self) -> None:
        """Swap the crashed page for a fresh blank one in the same context."""
        state = self._state
        crashed = state.page
        timeout_s = state.config.open_timeout_s
        try:
            page = await within(state.context.new_page(), timeout_s, "new_page")
        except PlaywrightError as exc:  # CommandTimeout too
            raise browser_failure(
                exc, "cannot open a new tab in place of the page", dead=state.browser_crashed
            ) from None
        self._tabs.forget(page)  # not a tab the page opened
        with contextlib.suppress(PlaywrightError):
            await within(crashed.close(), timeout_s, "page.close")
        state.replace(page)
        state.nav.expect_commit()
