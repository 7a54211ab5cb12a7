"""The page a browser session drives, and what every part of the session reads of it.

``BrowserSession`` is made of parts, each given this one ``PageState`` in its constructor (and the
other parts it needs): ``capture`` (screenshots), ``settle`` (the wait after an action), ``tabs``
(new and closed tabs), ``faults`` (downloads, dialogs, crashes, reopening a page) and ``control``
(goto, history, mouse and keyboard). The state holds what they share: the current tab, its own CDP
session, whether its renderer crashed, where the main frame's navigation stands (``Navigation``)
and the page events the policy reads next. Only this module assigns those fields; the parts
change them through the methods here.

A part subscribes to what it handles: ``on_page`` for the Playwright events of each page the session
drives (the first one and every tab it moves to), ``on_cdp`` for the events of each CDP session it
opens on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import structlog
from playwright.async_api import BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

from ..config import BrowserConfig
from ..errors import BrowserTimeoutError
from .crashes import browser_failure, dead_target, first_line, unless_crashed
from .deadline import BoundedCDPSession, CommandTimeout, within
from .devsession import CDPChannel, DevToolsSession
from .devtools import devtools_for
from .guard import NavigationGuard
from .launcher import kill_frozen
from .scripts import HIDE_CARET, SHOW_CARET

__all__ = ["Navigation", "PageState", "first_line"]  # first_line: from .crashes, for the parts

log = structlog.get_logger("webagent.browser")
T = TypeVar("T")

#: Seconds a caller's page gets to show its caret again when the session lets go of it.
CARET_RESTORE_S = 2.0
#: Seconds a browser gets to answer a probe (a browser-level command, no page involved) after a
#: command of the session passed its deadline: none means the browser itself is frozen.
PROBE_S = 5.0


class Navigation:
    """The main frame's navigation that the last action started: whether the page asked to leave its
    document, and whether that navigation committed, was aborted or failed (``settle`` waits on it)."""

    def __init__(self) -> None:
        self.requested = False  # the page asked for another document: settle waits for its commit and load
        self.committed = asyncio.Event()  # the main frame committed (or never will: a download, a crash, a block)
        self.aborted = False
        self.abort_resolved = asyncio.Event()  # after an aborted navigation: a download began, or a page committed
        self.failure: str | None = None  # the network error of the last failed navigation
        self.error_page_committed = asyncio.Event()  # Chromium's page for a failed navigation
        self.refused = asyncio.Event()  # the guard refused a main-frame navigation (since start_goto)
        self.goto_committed = asyncio.Event()  # the main frame committed a document (since start_goto)
        self.watched = False  # an action or goto is under way: its wait reports a failure (finish)

    def reset(self) -> None:
        """Before an action: nothing requested, committed or failed yet."""
        self.requested = False
        self.committed.clear()
        self.aborted = False
        self.abort_resolved.clear()
        self.failure = None
        self.watched = True

    def request(self) -> None:
        self.requested = True

    def expect_commit(self) -> None:
        """A new page is driven: a commit seen on the one before does not count."""
        self.committed.clear()

    def settled(self) -> None:
        """The navigation settle may be waiting for has committed, or never will (a download, a crash,
        a guard block): end both the wait for its commit and the grace for a late download."""
        self.committed.set()
        self.abort_resolved.set()

    def main_frame_committed(self, url: str) -> None:
        self.settled()
        self.goto_committed.set()
        if url.startswith("chrome-error:"):
            self.error_page_committed.set()

    def abort(self) -> None:
        """The navigation request was aborted (replaced by another navigation, or a download): nothing commits."""
        self.aborted = True
        self.committed.set()

    def fail(self, text: str) -> bool:
        """The navigation failed (Chromium's error page commits next): whether an action's wait holds
        ``text`` to report it when settled (False: none is under way, or it ended before the failure
        came, e.g. at the settle cap; the caller reports it at once)."""
        if not self.watched:
            return False
        self.failure = text
        return True

    def start_goto(self) -> None:
        self.error_page_committed.clear()
        self.refused.clear()
        self.goto_committed.clear()
        self.watched = True

    def finish(self) -> str | None:
        """The wait for the navigation is over: its failure, to be reported (None if none)."""
        failure, self.failure = self.failure, None
        self.requested = False
        self.watched = False
        return failure


class _Emitter(Protocol):
    """A Playwright object with events (a page, a context)."""

    def on(self, event: Any, f: Any) -> None: ...
    def remove_listener(self, event: Any, f: Any) -> None: ...


class PageState:
    """The tab a session drives, its own CDP session, its crash flag, navigation and page events."""

    def __init__(self, page: Page, config: BrowserConfig, *, owns_context: bool, owns_page: bool) -> None:
        self.config = config
        self.page = page
        self.context: BrowserContext = page.context
        self.owns_context = owns_context
        self.owns_page = owns_page
        size = page.viewport_size or {"width": config.viewport.width, "height": config.viewport.height}
        self.viewport = (int(size["width"]), int(size["height"]))
        self.guard: NavigationGuard | None = None
        self.cdp: CDPChannel | None = None  # the session's own CDP session on self.page (see cdp_session)
        #: The caret is still to be hidden in the document the CDP session was attached to: the next
        #: view read (``Capture._view``) does it in its own Runtime.evaluate, before any screenshot.
        self.caret_pending = False
        # Its CDP sessions on the tabs it moved off (their guard interception stays), ended by
        # detach_cdp, or when it comes back to the tab and opens a new one there.
        self._left: list[tuple[Page, CDPChannel]] = []
        self.main_frame_id = ""
        self.crashed = False  # the renderer of self.page died; reopened before the next screenshot
        self._crash = asyncio.Event()  # set when it does (a CDP session being opened stops waiting)
        self.saw_target_closed = False  # a call failed because the page, context or browser closed
        #: The browser answered neither a command of the session nor a probe: frozen (the pool retires it).
        self.browser_stuck = False
        self.nav = Navigation()
        self.events: list[str] = []
        self.dialogs_handled = 0  # JavaScript dialogs accepted (or gone) and reported so far
        self.dialog_handled = asyncio.Event()  # set at each; settle() waits on it for an action's dialog
        self._page_watchers: list[Callable[[Page], None]] = []
        self._summaries: list[Callable[[], list[str]]] = []  # lines added at each drain (on_drain)
        self._switch_hooks: list[Callable[[Page], None]] = []
        self._watched: weakref.WeakSet[Page] = weakref.WeakSet([page])  # pages the watchers were given
        self._listeners: list[tuple[_Emitter, str, Callable[..., Any]]] = []
        self._cdp_handlers: list[tuple[str, Callable[[Any], None]]] = []

    @property
    def recovers(self) -> bool:
        """Whether the page is the session's own, so that it may be replaced by a fresh tab."""
        return self.owns_context or self.owns_page

    # -- page events and switching pages ----------------------------------------------------
    def report(self, text: str) -> None:
        """A page event for the policy's next observation."""
        self.events.append(text)

    def note_dialog_handled(self) -> None:
        """A dialog was accepted and reported, or went away with its page."""
        self.dialogs_handled += 1
        self.dialog_handled.set()

    def drain_events(self) -> list[str]:
        events, self.events = self.events, []
        return events + [line for summary in self._summaries for line in summary()]

    def on_drain(self, summary: Callable[[], list[str]]) -> None:
        """Add ``summary()``'s lines at each drain: events counted rather than told one by one (a
        flood of downloads is one line, however many the page started)."""
        self._summaries.append(summary)

    def on_page(self, watch: Callable[[Page], None]) -> None:
        """Call ``watch`` with the current page now, and with each page the session moves to for
        the first time (its listeners stay on the page: one set however often it is driven again)."""
        self._page_watchers.append(watch)
        watch(self.page)

    def on_switch(self, hook: Callable[[Page], None]) -> None:
        """Call ``hook`` with the page each time the session moves to another (or the same) tab."""
        self._switch_hooks.append(hook)

    def listen(self, target: _Emitter, event: str, handler: Callable[..., Any]) -> None:
        """``target.on(event, handler)``, undone by ``unlisten`` (a caller's page keeps no handler of ours)."""
        target.on(event, handler)
        self._listeners.append((target, event, handler))

    def unlisten(self) -> None:
        """Remove every handler ``listen`` added to pages and the context."""
        for target, event, handler in self._listeners:
            with contextlib.suppress(Exception):  # a page or context already gone keeps nothing
                target.remove_listener(event, handler)
        self._listeners.clear()
        self._watched = weakref.WeakSet()

    def on_cdp(self, event: str, handler: Callable[[Any], None]) -> None:
        """Handle ``event`` of each CDP session the session opens (while it is the current one)."""
        self._cdp_handlers.append((event, handler))

    def switch_to(self, page: Page) -> None:
        """Drive ``page`` from now on (a new tab, or the last open one); its CDP session opens anew.
        A crash of the tab left behind is not the new tab's: it is not reopened for it."""
        if page is not self.page:
            self.crashed = False
            self._crash = asyncio.Event()
        # Its guard interception stays on the tab left behind (see _left); closed tabs need none.
        self._left = [(p, cdp) for p, cdp in self._left if not p.is_closed()]
        if self.cdp is not None and not self.page.is_closed():
            self._left.append((self.page, self.cdp))
        self.page = page
        self.cdp = None
        if page not in self._watched:  # back on a tab it drove before: its handlers are there already
            self._watched.add(page)
            for watch in self._page_watchers:
                watch(page)
        for hook in self._switch_hooks:
            hook(page)

    def replace(self, page: Page) -> None:
        """Drive ``page``, a fresh tab opened in place of one whose renderer died or that stopped answering."""
        self.crashed = False
        self._crash = asyncio.Event()
        self.switch_to(page)

    def note_crash(self, page: Page) -> bool:
        """The renderer of ``page`` died: whether it is the current page (which then counts as crashed)."""
        if page is not self.page:
            return False
        self.crashed = True
        self._crash.set()
        self.nav.settled()
        return True

    # -- the browser under the session ------------------------------------------------------
    @property
    def browser_crashed(self) -> bool:
        browser = self.context.browser
        return browser is not None and not browser.is_connected()

    async def browser_answers(self, what: str) -> None:
        """After ``what`` passed its deadline: BrowserTimeoutError if the browser itself answers
        nothing (a probe over its direct connection, a browser-level command no page takes part in,
        unanswered within ``PROBE_S``). Then no page-level recovery can help: the run ends with an
        infrastructure error at once, and the pool retires the browser. Where there is no direct
        connection, or the browser answered the probe, the caller recovers as it would."""
        devtools = devtools_for(self.context.browser)
        if devtools is None or self.browser_crashed:
            return
        replies = devtools.replies
        try:
            await devtools.request("Browser.getVersion", None, timeout_s=PROBE_S)
        except CommandTimeout:
            if devtools.replies > replies or devtools.closed:  # answers others, or gone: not frozen
                return
            self.browser_stuck = True
            log.warning("browser_frozen", what=what, probe_s=PROBE_S)
            kill_frozen(self.context.browser)  # its other sessions end now, not each on its deadlines
            raise BrowserTimeoutError(
                f"the browser answers nothing: {what}, and a probe got no answer within {PROBE_S:g} s either"
            ) from None
        except PlaywrightError:  # the connection closed: a crash, which the batch finds by itself
            return

    def target_closed(self, exc: PlaywrightError) -> bool:
        """Whether ``exc`` says the page, context or browser is gone (remembered for the batch)."""
        closed = "has been closed" in str(exc) or self.page.is_closed() or self.browser_crashed
        self.saw_target_closed |= closed
        return closed

    def dead(self, exc: BaseException) -> bool:
        """Whether a call failed with ``exc`` because what it needed is gone: the page's renderer
        crashed, the page, its context or the browser closed (``webagent.browser.crashes``)."""
        gone = self.crashed or self.page.is_closed() or self.browser_crashed or dead_target(exc)
        if isinstance(exc, PlaywrightError):
            self.target_closed(exc)
        return gone

    # -- the navigation guard -----------------------------------------------------------------
    async def set_guard(self, guard: NavigationGuard) -> None:
        """Enforce a navigation policy on the context (before the first navigation): a BrowserError
        when it cannot be (no page is driven unguarded); a BrowserCrashError when the page's renderer
        died meanwhile, or the page, context or browser closed; a BrowserTimeoutError past its deadline."""
        self.guard = guard
        guard.on_event = self._on_guard_event
        try:
            await within(guard.install(self.context), self.config.command_timeout_s, "installing the navigation guard")
            if guard.active:
                await self.cdp_session()  # the guard's interception is attached with it
        except PlaywrightError as exc:  # CommandTimeout too
            raise browser_failure(exc, "cannot set up the navigation policy", dead=self.dead(exc)) from None

    def _on_guard_event(self, text: str, frame_id: str) -> None:
        self.report(text)
        if frame_id and frame_id == self.main_frame_id:
            self.nav.settled()  # the navigation will not commit (and no download follows): settle() stops waiting
            self.nav.refused.set()  # and a goto stops waiting for a load that may never come

    async def watch_navigations(self) -> None:
        """Attach the navigation guard's interception to the current page (no-op without a guard)."""
        if self.guard is not None and self.guard.active:
            with contextlib.suppress(PlaywrightError):
                await self.cdp_session()  # its Fetch interception watches navigations from now on

    # -- the session's own CDP session ------------------------------------------------------
    async def cdp_session(self) -> CDPChannel:
        """The CDP session on the current page, opened (with every ``on_cdp`` handler) when there is none."""
        lost = self.cdp
        if isinstance(lost, DevToolsSession) and lost.closed and not lost.gone and not self.page.is_closed():
            self.cdp = None  # its connection was lost with the page still open: a new session
        if self.cdp is None:
            await self._end_left(self.page)  # back on a tab it left: one session on it, not two
            cdp = await self._open_cdp()
            for event, handler in self._cdp_handlers:
                cdp.on(event, self._while_current(cdp, handler))
            try:
                await self._set_up(cdp)
            except BaseException:
                with contextlib.suppress(PlaywrightError, TimeoutError):
                    async with asyncio.timeout(2.0):
                        await cdp.detach()  # no handlers left behind
                raise
            self.cdp = cdp
        return self.cdp

    async def _open_cdp(self) -> CDPChannel:
        """A session on the browser's own DevTools port where there is one (``webagent.browser.devtools``:
        no driver hop per command), else Playwright's. A PlaywrightError ("Target crashed") at once
        when the page's renderer died, before or meanwhile: a crashed target may never answer."""
        if self.crashed:
            raise PlaywrightError("attaching to the page: Target crashed")
        if self.config.direct_cdp:
            devtools = devtools_for(self.context.browser)
            if devtools is not None:
                try:
                    return await self._unless_crashed(devtools.attach(self.context, self.page), "attach")
                except PlaywrightError as exc:
                    if self.crashed:
                        raise
                    log.debug("devtools_attach_failed", error=first_line(exc))
        timeout_s = self.config.command_timeout_s
        opening = within(self.context.new_cdp_session(self.page), timeout_s, "new_cdp_session")
        session = await self._unless_crashed(opening, "new_cdp_session")
        return BoundedCDPSession(session, timeout_s)

    async def _unless_crashed(self, opening: Awaitable[T], doing: str) -> T:
        """``opening``, unless the page's renderer dies first (or died before, unseen: asked when slow)."""
        try:
            return await unless_crashed(opening, self._crash, doing, page=self.page)
        finally:
            if self._crash.is_set() and not self.crashed:
                self.note_crash(self.page)

    def _while_current(self, cdp: CDPChannel, handler: Callable[[Any], None]) -> Callable[[Any], None]:
        """``handler`` for the events of ``cdp`` while it is the session's own: a tab the session
        has left (or a page it replaced) keeps its CDP session, whose events must not count."""

        def forward(params: Any) -> None:
            if self.cdp is cdp:
                handler(params)

        return forward

    async def _set_up(self, cdp: CDPChannel) -> None:
        # A crashed page never answers Page.enable; a new renderer on a loaded machine may take long.
        # A PlaywrightError for a crashed page: the screenshot reopens it (a BrowserError would end the run).
        if self.crashed:
            raise PlaywrightError("Page.enable: Target crashed")
        timeout_s = self.config.command_timeout_s
        try:  # its own deadline; a page whose crash this session never saw would let it wait it out
            await self._unless_crashed(cdp.send("Page.enable", timeout_s=timeout_s), "Page.enable")
        except CommandTimeout:
            if self.crashed:
                raise PlaywrightError("Page.enable: Target crashed") from None
            raise BrowserTimeoutError(
                f"the page does not answer DevTools requests (none within {timeout_s:g} s)"
            ) from None
        # Choosers are intercepted here rather than through Playwright's "filechooser" event, which
        # the driver reports a round trip later: a chooser then reaches the very next observation.
        # Its failure (an old browser) costs only that report, as Playwright ignores it too.
        # The caret is hidden in each new document of the tab (while this CDP session is attached),
        # and in the current one by the next view read (caret_pending: no Runtime.evaluate of its
        # own); a failure costs only screenshots that may differ by the caret.
        caret = (
            [cdp.send("Page.addScriptToEvaluateOnNewDocument", {"source": HIDE_CARET})]
            if self.config.hide_caret
            else []
        )
        self.caret_pending = self.config.hide_caret
        intercept: Any
        tree: Any
        intercept, tree, *hidden = await asyncio.gather(
            cdp.send("Page.setInterceptFileChooserDialog", {"enabled": True}),
            cdp.send("Page.getFrameTree"),
            *caret,
            return_exceptions=True,
        )
        if isinstance(tree, BaseException):
            raise tree
        if isinstance(intercept, BaseException):
            log.debug("file_chooser_interception_unavailable", error=first_line(intercept))
        for failed in (h for h in hidden if isinstance(h, BaseException)):
            log.debug("caret_not_hidden", error=first_line(failed))
        self.main_frame_id = str(tree["frameTree"]["frame"]["id"])
        if self.guard is not None:
            await self.guard.attach(cdp, self.main_frame_id)

    async def detach_cdp(self) -> None:
        """Detach the session's own CDP sessions, on its page and on each tab it moved off (from a
        caller's context: no Fetch interception left, the caret shown again), concurrently, each bounded."""
        sessions = [*self._left, *([(self.page, self.cdp)] if self.cdp is not None else [])]
        self._left, self.cdp = [], None
        await asyncio.gather(*(self._let_go(page, cdp, show_caret=True) for page, cdp in sessions))

    async def _end_left(self, page: Page) -> None:
        """Detach the sessions left on ``page`` (a new one is opened there, hiding the caret again)."""
        ended = [cdp for p, cdp in self._left if p is page]
        if ended:
            self._left = [(p, cdp) for p, cdp in self._left if p is not page]
            await asyncio.gather(*(self._let_go(page, cdp, show_caret=False) for cdp in ended))

    async def _let_go(self, page: Page, cdp: CDPChannel, *, show_caret: bool) -> None:
        if show_caret and self.config.hide_caret and not page.is_closed():
            # In every frame the new-document script reached, not only the main one.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CARET_RESTORE_S):
                    await asyncio.gather(*(frame.evaluate(SHOW_CARET) for frame in page.frames), return_exceptions=True)
        with contextlib.suppress(PlaywrightError):
            await within(cdp.detach(), self.config.open_timeout_s, "CDPSession.detach")
