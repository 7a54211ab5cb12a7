"""Screenshots of a browser session, and the capture ``settle`` starts ahead of the next one.

A screenshot is one CDP ``Page.captureScreenshot``, encoded by the browser at the size the model
needs (``clip.scale`` costs nothing; decoding and resizing in Python would). The clip is in
document coordinates, so it needs the page's scroll offsets: ``settle`` reads them in the same
round trip as its check that the page has handled the action.

After an action that settles without a navigation, the next screenshot is usually already taken:
``settle`` starts the capture together with its check (at the scroll offsets of the previous
screenshot), so the browser renders the action's effect once, right after the input, and the
two round trips overlap. The capture is kept only if the check then finds the same page, the same
scroll offsets and no new page event (dialog, download, navigation, new tab); otherwise it is
dropped and the next screenshot is taken afresh.

Two consequences. The early capture may be composited just before the check's round trip runs,
so a change a page makes in a timer or network callback during that round trip (a few ms) shows
in the following screenshot instead (the agent's next observation shows it then, as it shows
any later change). Likewise, the check is a raw CDP round trip on the session's own CDP session,
which also carries the events that matter (new tab, navigation start, file chooser). The page
asks for those while it handles the action's input, before the input is acknowledged, so in
practice they arrive before the check's answer. An event that only Playwright's channel reports
a moment later (a frame's navigation blocked by the guard's route) may reach the step after,
reported then, never lost. And a caller who changes the page through ``session.page`` directly
between an action and the next screenshot must call ``invalidate_capture()`` first, or, where the
change is one a capture still pending in the browser would miss (a page clock run: the browser
answers that capture and the next with the same frame), ``await discard_capture()``. Sessions on
a caller's own page or context (the library's ``page=``/``context=``) never capture ahead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import structlog
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from ..errors import BrowserTimeoutError
from ..guard.secrets import well_formed
from ..images import Frame, Screenshot
from .crashes import browser_failure
from .deadline import CommandTimeout, within
from .devsession import CDPChannel, DevToolsSession
from .faults import PageFaults
from .scripts import HIDE_CARET, REAL, TWO_FRAMES, VIEW_AFTER_FRAME, VIEW_NOW
from .state import PageState, first_line

__all__ = ["MAX_PAGE_REOPENS", "Prefetch", "ScreenCapture"]

#: What ``_view`` raises on a page that cannot answer (gone, crashed, a throwing getter, a timeout).
VIEW_ERRORS = (PlaywrightError, TimeoutError, LookupError, TypeError, ValueError)

Scroll = tuple[float, float]

#: Times a screenshot is sent again after navigations committed while it waited.
CAPTURE_RESENDS = 3
#: Times a session reopens a page that gives no screenshot; the next time the run ends (a page, or
#: a browser, that stops answering at every step would otherwise be reopened until the time limit).
MAX_PAGE_REOPENS = 3

log = structlog.get_logger("webagent.browser")


class Prefetch:
    """A capture started by ``settle`` for the next screenshot."""

    def __init__(self, page: Page, frame: Frame, scroll: Scroll | None, task: asyncio.Future[Any]) -> None:
        self.page = page
        self.frame = frame
        self.scroll = scroll  # the offsets the clip assumed (None: no clip)
        self.task = task

    def drop(self) -> None:
        if not self.task.done():
            self.task.cancel()
        self.task.add_done_callback(_retrieve)


class _CaptureLost(Exception):
    """A navigation committed while a capture waited for a frame of the document it replaced."""


def _relay(task: asyncio.Future[Any], waiting: asyncio.Future[Any]) -> None:
    """Hand the result of a capture sent through Playwright to the future the session awaits."""
    if waiting.done():
        _retrieve(task)
    elif task.cancelled():
        waiting.cancel()
    elif (exc := task.exception()) is not None:
        waiting.set_exception(exc)
    else:
        waiting.set_result(task.result())


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class ScreenCapture:
    """Screenshots, the scroll offsets and title they need, and the capture ``settle`` starts early."""

    def __init__(self, state: PageState, faults: PageFaults) -> None:
        self._state = state
        self._faults = faults  # reopens a page that crashed or gives no screenshot
        self._settled_scroll: Scroll | None = None  # read by settle, used once by screenshot
        self._title: str | None = None
        #: The document's URL as the last view read found it, and Playwright's URL of the page then.
        self._href: tuple[str, str] | None = None
        self._shot_frame: Frame | None = None  # the frame of the last screenshot
        self._shot_scroll: Scroll | None = None  # the scroll offsets its clip used
        self._prefetched: Prefetch | None = None  # started by settle and checked: the next screenshot
        #: Screenshots that were taken by ``settle`` ahead of time (for tests and benchmarks).
        self.prefetched_shots = 0
        #: Screenshots sent again because a navigation committed while they waited (Chromium drops
        #: those), retaken after one did not come, and pages reopened because none came.
        self.captures_resent = 0
        self.captures_recovered = 0
        self._capture_in_flight: asyncio.Future[Any] | None = None
        self.pages_replaced = 0
        self._recoveries: list[str] = []
        #: Expressions read in settle's round trip (``probe``), and their values at the last one.
        self._probes: dict[str, str] = {}
        self.probed: dict[str, Any] = {}
        state.on_switch(lambda _: self.invalidate_view())  # another tab: another view
        state.on_cdp("Page.frameNavigated", self._on_frame_committed)

    # -- view -----------------------------------------------------------------------------
    async def title(self) -> str:
        if self._title is None:
            await self._read_view()
        return self._title or ""

    async def _read_view(self) -> Scroll:
        """Scroll offsets now (one round trip, which also refreshes the title)."""
        try:
            async with asyncio.timeout(2.0):
                return await self._view()
        except VIEW_ERRORS:
            return (0.0, 0.0)

    def probe(self, name: str, expression: str | None) -> None:
        """Read the JavaScript ``expression`` in settle's round trip from now on (None: no longer),
        its value in ``probed[name]`` (None when it threw): what an action changed, at no page read
        of its own. Without probes the round trip is the same as ever."""
        if expression is None:
            self._probes.pop(name, None)
        else:
            self._probes[name] = expression

    async def read_settled_view(self, *, after_frame: bool, timeout_s: float) -> None:
        """Settle's check that the page handled the action, which reads the scroll offsets of the next
        screenshot (left unknown if the page cannot answer within ``timeout_s``) and the probes."""
        self.probed = {}
        with contextlib.suppress(*VIEW_ERRORS):
            async with asyncio.timeout(timeout_s):
                self._settled_scroll = await self._view(after_frame=after_frame, probes=self._probes)

    async def _view(self, *, after_frame: bool = False, probes: Mapping[str, str] | None = None) -> Scroll:
        """Scroll offsets and title, read through the page's main thread (so every input handler
        has run). Raw CDP ``Runtime.evaluate`` costs about two thirds of ``page.evaluate``'s CPU,
        counting Python, the Playwright driver and Chromium. Raises on a page that cannot answer."""
        state = self._state
        if state.crashed or state.page.is_closed():
            raise ValueError("the page cannot answer")  # a crashed target may never reply over CDP
        script = _with_probes(after_frame, probes) if probes else VIEW_AFTER_FRAME if after_frame else VIEW_NOW
        cdp = state.cdp
        known = state.page.url
        if cdp is None:  # no DevTools session yet: none is set up under the caller's deadline
            x, y, title, href, *probed = await state.page.evaluate(script)
        else:
            caret = state.caret_pending  # hidden in the same round trip (HIDE_CARET: idempotent, never throws)
            expression = f"({HIDE_CARET}, {script})" if caret else script
            reply = await cdp.send(
                "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
            )
            x, y, title, href, *probed = reply["result"]["value"]  # an exception in the page: no "value" (KeyError)
            if caret and cdp is state.cdp:
                state.caret_pending = False
        if probed and isinstance(probed[0], dict):
            self.probed = probed[0]
        self._title = well_formed(str(title))  # a page's title may hold a lone surrogate
        self._href = (str(href), known) if isinstance(href, str) else None
        return (float(x), float(y))

    def invalidate_view(self) -> None:
        self._settled_scroll = None
        self._title = None
        self._href = None

    def url(self, known: str) -> str:
        """The page's URL: Playwright's (``known``), or the document's as the last view read found it
        when Playwright has not caught up with it since: a same-document navigation (``pushState``,
        ``replaceState``, a fragment) that its channel reports late when the session's commands go
        over the direct DevTools connection. Never another origin: another document is Playwright's
        to report, and ``settle`` waits for it."""
        read = self._href
        if read is None or read[1] != known or read[0] == known:
            return known
        href, base = urlsplit(read[0]), urlsplit(known)
        return read[0] if (href.scheme, href.netloc) == (base.scheme, base.netloc) else known

    # -- screenshots ----------------------------------------------------------------------
    def _params(self, frame: Frame, scroll: Scroll | None) -> dict[str, Any]:
        config = self._state.config
        fmt = config.screenshot_format
        params: dict[str, Any] = {"format": fmt, "optimizeForSpeed": True}
        if fmt == "jpeg":
            params["quality"] = config.jpeg_quality
        if scroll is not None:
            params["clip"] = {
                "x": scroll[0],
                "y": scroll[1],
                "width": frame.css_width,
                "height": frame.css_height,
                "scale": frame.scale,
            }
        return params

    def _screenshot(self, result: dict[str, Any], frame: Frame) -> Screenshot:
        return Screenshot(b64=result["data"], mime=f"image/{self._state.config.screenshot_format}", frame=frame)

    async def screenshot(self, frame: Frame) -> Screenshot:
        """One screenshot, encoded by the browser at the frame's size."""
        state = self._state
        self._shot_frame = frame
        ready, self._prefetched = self._prefetched, None
        if ready is not None and ready.frame == frame and ready.page is state.page and not state.crashed:
            self._capture_in_flight = ready.task  # a commit now fails it (_CaptureLost): taken again below
            try:
                result = await ready.task
                self._settled_scroll, self._shot_scroll = None, ready.scroll
                self.prefetched_shots += 1
                return self._screenshot(result, frame)
            except _CaptureLost:
                self.captures_resent += 1
            except PlaywrightError:
                pass
            finally:
                self._capture_in_flight = None
        elif ready is not None:
            ready.drop()
        for attempt in range(3):
            while state.crashed:  # a reopened page may crash too (MAX_PAGE_CRASHES bounds this)
                await self._faults.reopen_after_crash()
            try:
                result = await self._capture(frame)
                break
            except PlaywrightError as exc:
                dead = state.dead(exc)
                if state.crashed and attempt < 2:
                    continue  # reopened above
                if attempt == 2 or state.page.is_closed():  # gone, or no screenshot three times
                    raise browser_failure(exc, "cannot take a screenshot", dead=dead) from None
                # Right after a navigation the new document may have no frame to capture yet.
                with contextlib.suppress(PlaywrightError, TimeoutError):
                    async with asyncio.timeout(0.5):
                        await state.page.evaluate(TWO_FRAMES)
        return self._screenshot(result, frame)

    async def _capture(self, frame: Frame) -> dict[str, Any]:
        cdp = await self._state.cdp_session()
        for _ in range(1 + CAPTURE_RESENDS):
            scroll: Scroll | None = None
            if frame.is_identity:
                if self._state.caret_pending:  # no view read to hide it in: one of its own
                    await self._read_view()
            else:
                # Right after settle() the offsets are known; otherwise they are read now.
                scroll, self._settled_scroll = self._settled_scroll, None
                scroll = scroll or await self._read_view()
            self._shot_scroll = scroll
            params = self._params(frame, scroll)
            try:
                result: dict[str, Any] = await self._capture_request(cdp, params)
            except _CaptureLost:  # a navigation committed while it waited: Chromium will never answer it
                self.captures_resent += 1
                self._recoveries.append("A navigation committed while the screenshot was taken; it was taken again.")
                continue
            except CommandTimeout:
                break
            finally:
                self._capture_in_flight = None
            return result
        return await self._recover_capture(frame, params)

    def _capture_request(self, cdp: CDPChannel, params: dict[str, Any]) -> asyncio.Future[Any]:
        """``Page.captureScreenshot`` as a future that ``_on_frame_committed`` can fail (``_CaptureLost``)."""
        waiting = self._capture_in_flight = self._send_capture(cdp, params)
        return waiting

    def _send_capture(self, cdp: CDPChannel, params: dict[str, Any]) -> asyncio.Future[Any]:
        """``Page.captureScreenshot`` as a plain future (one that can be failed from outside)."""
        timeout_s = self._state.config.capture_timeout_s
        if isinstance(cdp, DevToolsSession):
            return cdp.request("Page.captureScreenshot", params, timeout_s=timeout_s)
        waiting: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        sent = asyncio.ensure_future(cdp.send("Page.captureScreenshot", params, timeout_s=timeout_s))
        sent.add_done_callback(lambda task: _relay(task, waiting))
        waiting.add_done_callback(lambda _: sent.cancel())  # no-op once sent is done
        return waiting

    def _on_frame_committed(self, params: dict[str, Any]) -> None:
        """CDP ``Page.frameNavigated``: a document committed. In the main frame it replaces the page's
        frame host (every cross-site navigation, and same-site ones since Chromium's RenderDocument),
        and a capture still waiting for the old one's frame is dropped without an answer: send it again.
        A capture taken ahead of the next screenshot shows the old document: it is dropped."""
        if params.get("frame", {}).get("parentId"):
            return
        waiting = self._capture_in_flight
        if waiting is not None and not waiting.done():
            waiting.set_exception(_CaptureLost())
        self.drop_prefetch()

    # -- a screenshot that does not come ----------------------------------------------------
    async def _recover_capture(self, frame: Frame, params: dict[str, Any]) -> dict[str, Any]:
        """Chromium left a screenshot unanswered (docs/faults.md says when): take it again, then on a
        new DevTools session, and if the page still gives none, reopen it in a new tab (the policy is told)."""
        state = self._state
        timeout_s, url = state.config.capture_timeout_s, state.page.url
        log.warning("capture_timed_out", url=url, timeout_s=timeout_s)
        await state.browser_answers(f"no screenshot within {timeout_s:g} s")  # a frozen browser: no page helps
        for how, again in (("", self._capture_again), (" on a new DevTools session", self._capture_on_new_session)):
            try:
                result = await again(params)
            except PlaywrightError as exc:  # CommandTimeout too
                log.warning("capture_retry_failed", url=url, how=how.strip() or "same session", error=first_line(exc))
                continue
            self.captures_recovered += 1
            self._recoveries.append(f"The screenshot did not come within {timeout_s:g} s; it was taken again{how}.")
            return result
        if not state.recovers:
            raise BrowserTimeoutError(f"the page gives no screenshot (none within {timeout_s:g} s, twice) at {url}")
        if self.pages_replaced >= MAX_PAGE_REOPENS:
            raise BrowserTimeoutError(
                f"the page gives no screenshot at {url}, after it was reopened {self.pages_replaced} times for that"
            )
        note = await self._faults.reopen(url)
        self.pages_replaced += 1
        self._recoveries.append(f"The page gave no screenshot twice; it was reopened in a new tab{note}.")
        state.report(f"The page stopped responding; the agent reopened {url} in a new tab{note}.")
        cdp = await state.cdp_session()
        scroll = None if frame.is_identity else await self._read_view()
        self._shot_scroll = scroll
        try:
            replaced: dict[str, Any] = await cdp.send(
                "Page.captureScreenshot", self._params(frame, scroll), timeout_s=timeout_s
            )
        except CommandTimeout:
            raise BrowserTimeoutError(f"the browser gives no screenshot of {url}, even in a new tab") from None
        return replaced

    async def _capture_again(self, params: dict[str, Any]) -> dict[str, Any]:
        """The same capture once more on the session's own CDP session (a capture that was waiting
        when a navigation committed is never answered, but the next one is)."""
        cdp = await self._state.cdp_session()
        result: dict[str, Any] = await cdp.send(
            "Page.captureScreenshot", params, timeout_s=self._state.config.capture_timeout_s
        )
        return result

    async def _capture_on_new_session(self, params: dict[str, Any]) -> dict[str, Any]:
        """The same capture on a CDP session of its own (through Playwright), closed afterwards."""
        state = self._state
        timeout_s = state.config.capture_timeout_s
        session = await within(state.context.new_cdp_session(state.page), timeout_s, "new_cdp_session")
        try:
            result: dict[str, Any] = await within(
                session.send("Page.captureScreenshot", params), timeout_s, "Page.captureScreenshot"
            )
        finally:
            with contextlib.suppress(PlaywrightError):
                await within(session.detach(), timeout_s, "CDPSession.detach")
        return result

    def drain_recoveries(self) -> list[str]:
        """What the session did since the last call to recover from a browser that did not answer."""
        recoveries, self._recoveries = self._recoveries, []
        return recoveries

    # -- the capture settle starts early --------------------------------------------------
    def start_prefetch(self) -> Prefetch | None:
        """Start the next screenshot now (settle calls this right after the input of an action that
        raised no page event and asked for no other page so far)."""
        state = self._state
        frame, cdp = self._shot_frame, state.cdp
        if frame is None or cdp is None or not state.owns_context or state.caret_pending:
            # on a caller's page: the caller may change it between steps, behind our back; a caret
            # still to hide: settle's read, sent after the capture, hides it
            return None
        if state.page.is_closed():
            return None
        scroll = None if frame.is_identity else self._shot_scroll
        if scroll is None and not frame.is_identity:
            return None
        # Sent with settle's check, which follows in the same loop turn (DevTools.request).
        return Prefetch(state.page, frame, scroll, self._send_capture(cdp, self._params(frame, scroll)))

    def check_prefetch(self, started: Prefetch, *, quiet: bool) -> None:
        """Keep the early capture only if the settled page is the one it shows (``quiet``: the action
        raised no page event, opened no tab, nor is one still pending)."""
        settled = self._settled_scroll  # None: the check failed, or a navigation invalidated the view
        if (
            started.page is self._state.page
            and settled is not None
            and (started.scroll is None or started.scroll == settled)
            and quiet
        ):
            self._prefetched = started
        else:
            started.drop()

    def drop_prefetch(self) -> None:
        """Forget the capture taken ahead by the last action."""
        if self._prefetched is not None:
            self._prefetched.drop()
            self._prefetched = None

    async def discard_prefetch(self, timeout_s: float) -> None:
        """Forget the capture taken ahead by the last action once the browser has answered it (at
        most ``timeout_s``): a capture still pending there is answered with the same frame as the
        next one, which would then show the page as it was before (a page clock run in between)."""
        started, self._prefetched = self._prefetched, None
        if started is None:
            return
        try:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout_s):
                    await asyncio.shield(started.task)
        finally:
            started.drop()


def _with_probes(after_frame: bool, probes: Mapping[str, str]) -> str:
    """The view's expression with the probes' values after its own (each its own try: one that
    throws is null, the others are read)."""
    read = ", ".join(
        f"{json.dumps(name)}: (() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()"
        for name, expression in probes.items()
    )
    values = f"{VIEW_NOW[:-1]}, {{{read}}}]"
    return f"new Promise(r => {REAL}.requestAnimationFrame(() => r({values})))" if after_frame else values
