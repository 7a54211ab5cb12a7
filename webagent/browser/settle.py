"""How a browser session knows the page has reacted to an action.

After each action ``settle`` waits only as long as the page needs: one round trip through the
page's main thread (``Runtime.evaluate`` on the session's own CDP session, which also reads the
scroll offsets and title the next screenshot needs), plus a frame after scrolling; then the load
of a navigation or new tab the action started, and the report of a JavaScript dialog it opened
(accepted by ``webagent.browser.faults`` on Playwright's event, which may come after the round
trip), capped by ``settle_timeout_s``.

Navigations are known from CDP events on that same session: ``Page.frameStartedNavigating``
(every main-frame navigation that leaves the document, browser-initiated and history ones
included) and ``Page.frameRequestedNavigation`` (what an older browser reports). The page asks
for them while it handles the action's input, so in practice they arrive before the check's
answer. Their commit is Playwright's ``framenavigated`` of the main frame; where the navigation
stands is the session's ``Navigation`` (``webagent.browser.state``), which downloads, crashes and
guard blocks end too. New tabs (``Page.windowOpen``) and file choosers (``Page.fileChooserOpened``)
come the same way and are handled by ``webagent.browser.tabs`` and ``webagent.browser.faults``, and
so do downloads (``Page.downloadWillBegin``): the wait lasts until each one the action started is
kept or refused and told (``webagent.browser.downloads``), within the same cap.

The wait also decides whether the screenshot that ``webagent.browser.capture`` started right after
the input shows the settled page: only an action that raised no page event, opened no tab and
asked for no other document keeps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Frame as PlaywrightFrame
from playwright.async_api import Page
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from ..errors import ActionError, BrowserError
from .capture import ScreenCapture
from .downloads import PageDownloads
from .faults import ABORT_GRACE_S
from .state import PageState
from .tabs import TabFollower

__all__ = ["Settler"]

#: Page.frameStartedNavigating types that stay in the document (nothing to wait for).
_SAME_DOCUMENT = frozenset({"sameDocument", "historySameDocument"})


class Settler:
    """The main frame's navigation events, the reset before each action, and the wait after it."""

    def __init__(self, state: PageState, capture: ScreenCapture, tabs: TabFollower, downloads: PageDownloads) -> None:
        self._state = state
        self._capture = capture
        self._tabs = tabs
        self._downloads = downloads
        self._action_events = 0  # page events reported before the current action began
        self._dialogs_opened = 0  # JavaScript dialogs opened during the current action
        self._dialogs_handled = 0  # state.dialogs_handled when the current action began
        state.on_page(self._watch)
        state.on_cdp("Page.frameRequestedNavigation", self._on_requested_navigation)
        state.on_cdp("Page.frameStartedNavigating", self._on_started_navigating)
        state.on_cdp("Page.javascriptDialogOpening", self._on_dialog_opening)

    # -- navigation events ----------------------------------------------------------------------
    def _watch(self, page: Page) -> None:
        self._state.listen(page, "framenavigated", self._on_frame_navigated)

    def _on_frame_navigated(self, frame: PlaywrightFrame) -> None:
        if frame == self._state.page.main_frame:
            self._state.nav.main_frame_committed(frame.url)

    def _on_requested_navigation(self, params: dict[str, Any]) -> None:
        # Fired by the renderer as soon as a link/form/script asks to navigate, before any request.
        main_frame = params.get("frameId") == self._state.main_frame_id
        if params.get("disposition", "currentTab") == "currentTab" and main_frame:
            self._state.nav.request()

    def _on_started_navigating(self, params: dict[str, Any]) -> None:
        # Every navigation, browser-initiated and history ones included (recent Chromium: Playwright
        # 1.51+ bundles one; an older browser behind cdp_endpoint reports only the renderer's, through
        # frameRequestedNavigation). Not Playwright's "request" event: subscribing to it costs
        # ~0.25 ms of Python for every request of every page.
        if params.get("frameId") == self._state.main_frame_id and params.get("navigationType") not in _SAME_DOCUMENT:
            self._state.nav.request()

    def _on_dialog_opening(self, params: dict[str, Any]) -> None:
        # On the session's own CDP channel, in order with settle's check: Playwright's "dialog"
        # event (the session accepts the dialog, then reports it) may come after the check answered;
        # settle() waits for that report, so the action's own observation carries it.
        self._dialogs_opened += 1

    # -- settling ---------------------------------------------------------------------------
    async def before_action(self) -> None:
        state = self._state
        if state.crashed:
            raise ActionError("the page crashed before the action (its renderer process died); it will be reopened")
        with contextlib.suppress(PlaywrightError, BrowserError):  # subscribe to Page.windowOpen before a tab can open
            await state.cdp_session()
        self._capture.drop_prefetch()
        self._action_events = len(state.events)
        self._dialogs_opened = 0
        self._dialogs_handled = state.dialogs_handled
        self._capture.invalidate_view()
        state.nav.reset()
        self._tabs.reset()
        self._downloads.before_action()

    def settle_ms(self) -> float:
        """``settle_timeout_s`` in ms, for Playwright calls that wait for a navigation's commit."""
        return max(1.0, self._state.config.settle_timeout_s * 1000)

    def _quiet(self) -> bool:
        """Whether the action so far raised no page event (dialog, download, ...), no new tab, no crash."""
        state = self._state
        return not (
            state.crashed or self._dialogs_opened > 0 or self._tabs.pending or len(state.events) > self._action_events
        )

    async def settle(self, *, next_frame: bool = False) -> None:
        """Wait until the page has reacted to the last action, at most ``settle_timeout_s``."""
        deadline = time.monotonic() + self._state.config.settle_timeout_s
        # A navigation may replace the document mid-wait, or the page may be busy: both are fine.
        self._capture.invalidate_view()
        self._capture.drop_prefetch()
        # After scrolling or waiting the next screenshot is taken after the next frame instead; after
        # an action that already asked for another page or raised a dialog, it is taken afresh.
        early = not next_frame and not self._state.nav.requested and self._quiet()
        started = self._capture.start_prefetch() if early else None
        try:
            await self._settle(deadline, next_frame)
        finally:
            if started is not None:
                # quiet: also no new tab still pending (or settle cancelled waiting for one)
                self._capture.check_prefetch(started, quiet=self._quiet())

    async def _settle(self, deadline: float, next_frame: bool) -> None:
        if not self._state.nav.requested:
            # The round trip that tells the page has handled the input. Not when it has already asked
            # for another document while handling it (the input's reply came after that request): the
            # offsets read now would be the old page's, and the screenshot reads the new page's anyway.
            timeout_s = min(0.5, self._state.config.settle_timeout_s)
            await self._capture.read_settled_view(after_frame=next_frame, timeout_s=timeout_s)
        await self._tabs.follow(deadline)
        if self._state.nav.requested:
            self._capture.invalidate_view()
            await self._wait_for_navigation(deadline)
        await self._wait_for_dialogs(deadline)
        await self._downloads.settle(deadline)
        # The wait is over: a navigation that fails from now on is reported when it fails.
        failure = self._state.nav.finish()
        if failure is not None:
            self._state.report(failure)

    async def _wait_for_dialogs(self, deadline: float) -> None:
        """Until each dialog the action opened is accepted and reported (at most until ``deadline``)."""
        state = self._state
        while state.dialogs_handled - self._dialogs_handled < self._dialogs_opened:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            state.dialog_handled.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await state.dialog_handled.wait()

    async def _wait_for_navigation(self, deadline: float) -> None:
        state = self._state
        nav = state.nav
        try:
            if not nav.committed.is_set():
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await nav.committed.wait()
            if nav.aborted and not nav.abort_resolved.is_set():
                # A download, announced a moment after the abort? (Or another navigation's commit.)
                grace = min(ABORT_GRACE_S, max(0.0, deadline - time.monotonic()))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(grace):
                        await nav.abort_resolved.wait()
            # A failed navigation's error page loads too: the next navigation must not start before it
            # has (it would be aborted), though it is not reported as still loading (see below).
            remaining = max(1.0, (deadline - time.monotonic()) * 1000)
            await state.page.wait_for_load_state("load", timeout=remaining)
        except (TimeoutError, PlaywrightTimeoutError):
            if nav.failure is None:  # else the failure is the report, not "still loading" beside it
                state.report(f"The page was still loading after {state.config.settle_timeout_s:g} s.")
        except PlaywrightError:
            pass
        finally:
            failure = nav.finish()
            if failure is not None:
                state.report(failure)
