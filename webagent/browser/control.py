"""What a browser session does on the page: open a URL, go back, reload, mouse and keyboard.

Each action starts from a page that has not crashed (``Settler.before_action``), bounds every
browser call it makes (a Playwright failure becomes an ActionError, or a BrowserCrashError when the
page or browser is gone), and ends with ``settle``: the wait until the page has reacted.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import FilePayload, Frame
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from ..actions import normalize_key
from ..errors import ActionError, BrowserCrashError, NavigationError
from ..files.uploads import Upload
from .capture import ScreenCapture
from .deadline import CommandTimeout, within
from .devsession import DevToolsSession
from .faults import PageFaults
from .frames import locate
from .scripts import FILE_INPUT_OF, FIND_SELECT, GIVE_FILE, MASK_FOCUSED, SELECT_OF, WAIT_FOR_LOAD
from .settle import Settler
from .state import PageState, first_line
from .tabs import TabFollower

__all__ = ["PageControl"]

_TYPE_FAST_ABOVE = 64  # longer texts are inserted at once instead of key by key
_FOCUS_WAIT_S = 2.0  # how long a secret waits for the focus a click gave a field (a frame in another process)
_FOCUS_POLL_MS = 100  # each look in the located frame waits this long for the focus


class PageControl:
    """Navigation and input on the session's current page, each bounded and settled."""

    def __init__(
        self, state: PageState, capture: ScreenCapture, settler: Settler, tabs: TabFollower, faults: PageFaults
    ) -> None:
        self._state = state
        self._capture = capture
        self._settler = settler
        self._tabs = tabs
        self._faults = faults

    # -- navigation -----------------------------------------------------------------------
    async def goto(self, url: str, *, start: bool = False) -> None:
        """Open ``url``. At the start of a run a failure is a NavigationError, later an ActionError."""
        state = self._state
        if state.crashed:
            await self._faults.replace_page()
        self._capture.drop_prefetch()
        self._capture.invalidate_view()
        if state.guard is not None and state.guard.active:
            reason = await state.guard.refuse(url)
            if reason is not None:
                if start:
                    raise NavigationError(
                        f"cannot open {url}: {reason}; check allowed_domains/blocked_domains/private_network"
                    )
                raise ActionError(f"{url} was not opened: {reason}")
            with contextlib.suppress(PlaywrightError):
                await state.cdp_session()  # watches redirects from the first request on
        try:
            while True:
                try:
                    await self._goto(url)
                    break
                except PlaywrightTimeoutError:
                    raise
                except PlaywrightError as exc:
                    if not await self._faults.replaced_after_crash_in_load(exc):  # else: the same URL in a new tab
                        raise
        except PlaywrightTimeoutError:
            state.report(f"The page was still loading after {state.config.navigation_timeout_s:g} s.")
        except PlaywrightError as exc:
            reason = first_line(exc).removeprefix("Page.goto: ")
            # Its renderer died past what reopening recovers from, or the page, context or browser
            # closed: a crash, not the site's fault (nor the task's).
            if state.dead(exc) and (start or state.browser_crashed):
                raise BrowserCrashError(f"the page crashed or closed while opening {url}: {reason}") from None
            if start:
                raise NavigationError(f"cannot open {url}: {reason}; check the URL and that the site is up") from None
            raise ActionError(f"cannot open {url}: {reason}") from None
        finally:
            state.nav.finish()  # a goto reports its own failure

    async def _goto(self, url: str) -> None:
        self._state.nav.start_goto()
        try:
            await self._load(url)
        except PlaywrightTimeoutError:
            raise
        except PlaywrightError as exc:
            await self._faults.after_failed_goto(exc)
            raise

    async def _load(self, url: str) -> None:
        """``faults.load``, unless the guard refuses a main-frame navigation once the opened document
        has committed (a frame of it sending its parent elsewhere): Playwright then waits for a load
        event it never sees, to its whole timeout. The page stays on that document, and the goto
        waits for its load as the page itself sees it, within what is left of the goto's deadline.
        (A refusal before the commit, of the goto's own redirect, fails the goto as it did.)"""
        state = self._state
        deadline = time.monotonic() + state.config.navigation_timeout_s
        load = asyncio.ensure_future(self._faults.load(url))
        refused = asyncio.ensure_future(_both(state.nav.refused, state.nav.goto_committed))
        try:
            await asyncio.wait({load, refused}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            refused.cancel()
            if not load.done():
                load.cancel()
            await asyncio.gather(load, refused, return_exceptions=True)
        if not load.cancelled():
            load.result()  # its error, if any
            return
        remaining = max(0.1, deadline - time.monotonic())
        try:
            await within(state.page.evaluate(WAIT_FOR_LOAD), remaining, "the page's load")
        except PlaywrightTimeoutError:
            raise  # reported as a goto that timed out
        except PlaywrightError:
            pass  # the document went away meanwhile (another navigation): nothing more to wait for

    async def go_back(self) -> None:
        await self._settler.before_action()
        cdp = await self._state.cdp_session()
        history = await self.guard(cdp.send("Page.getNavigationHistory"))
        index = int(history["currentIndex"])
        if index <= 0 or history["entries"][index - 1]["url"] in ("about:blank", ""):
            raise ActionError("there is no previous page in this tab's history")
        page = self._state.page
        await self._navigate(page.go_back(wait_until="commit", timeout=self._settler.settle_ms()))

    async def refresh(self) -> None:
        await self._settler.before_action()
        page = self._state.page
        await self._navigate(page.reload(wait_until="commit", timeout=self._settler.settle_ms()))

    async def _navigate(self, awaitable: Any) -> None:
        """History navigation: wait for the commit, then settle (the load is capped there)."""
        try:
            await awaitable
        except PlaywrightTimeoutError:
            self._state.report(f"The page was still loading after {self._state.config.settle_timeout_s:g} s.")
        except PlaywrightError as exc:
            raise ActionError(first_line(exc)) from None
        self._state.nav.request()
        await self._settler.settle()

    # -- input ----------------------------------------------------------------------------
    async def click(self, x: float, y: float) -> None:
        await self._settler.before_action()
        await self.guard(self._click(x, y))
        await self._settler.settle()

    def _click(self, x: float, y: float) -> Awaitable[None]:
        """Playwright's ``mouse.click``, or the same three mouse events on the direct DevTools session."""
        cdp = self._state.cdp
        return cdp.click(x, y) if isinstance(cdp, DevToolsSession) else self._state.page.mouse.click(x, y)

    async def write(
        self,
        x: float,
        y: float,
        text: str,
        *,
        press_enter: bool,
        mask: bool = False,
        before_typing: Callable[[list[str]], None] | None = None,
    ) -> None:
        """Type into the field at (x, y). ``mask``: the field shows discs from now on (a secret);
        ``before_typing`` then gets the URLs of the documents from the focused field's frame up to the
        top, before any key is pressed (it refuses by raising)."""
        await self._settler.before_action()
        page = self._state.page
        keyboard = page.keyboard
        await self.guard(self._click(x, y))
        if mask:
            frame = await self.guard(self._mask_focused(x, y))
            if frame is None:
                raise ActionError("the secret was not typed: no text field has the focus there")
            if before_typing is not None:
                before_typing(_documents(frame))
        await self.guard(keyboard.press("ControlOrMeta+A"))
        if not text:
            await self.guard(keyboard.press("Backspace"))
        elif len(text) > _TYPE_FAST_ABOVE:
            await self.guard(keyboard.insert_text(text))
        else:
            await self.guard(keyboard.type(text))
        if press_enter:
            await self.guard(keyboard.press("Enter"))
        await self._settler.settle()

    async def _mask_focused(self, x: float, y: float) -> Frame | None:
        """Show the focused field as discs from now on: in the frame at (x, y), where the click put the
        focus; that frame (None: no field has the focus there)."""
        # A frame in another process may not be known yet (located as its <iframe> element in the
        # parent) or get the focus a moment after the click's reply: looked for again, up to a bound.
        until = time.monotonic() + _FOCUS_WAIT_S
        while True:
            target = await locate(self._state.page, x, y)
            if await target.frame.evaluate(MASK_FOCUSED, _FOCUS_POLL_MS):
                return target.frame
            if time.monotonic() >= until:
                return None

    async def scroll(self, direction: str) -> None:
        await self._settler.before_action()
        page = self._state.page
        w, h = self._state.viewport
        dx, dy = {"up": (0, -0.8 * h), "down": (0, 0.8 * h), "left": (-0.8 * w, 0), "right": (0.8 * w, 0)}[direction]
        await self.guard(page.mouse.move(w / 2, h / 2))
        await self.guard(page.mouse.wheel(dx, dy))
        await self._settler.settle(next_frame=True)

    async def press(self, key: str) -> None:
        await self._settler.before_action()
        await self.guard(self._state.page.keyboard.press(normalize_key(key)))
        await self._settler.settle(next_frame=True)

    async def select_option(self, x: float, y: float, option: str) -> str:
        """Choose ``option`` in the native select at (x, y) -- in a frame or a shadow root too;
        returns the chosen label."""
        await self._settler.before_action()
        target = await self.guard(locate(self._state.page, x, y))
        if target.element is None:
            raise ActionError("there is no element at that point")
        found = await self.guard(target.element.evaluate(FIND_SELECT, option))
        if "error" in found:
            raise ActionError(str(found["error"]))
        select = (await self.guard(target.element.evaluate_handle(SELECT_OF))).as_element()
        if select is None:
            raise ActionError("the dropdown disappeared")
        await self.guard(select.select_option(index=int(found["index"]), timeout=self._settler.settle_ms()))
        await self._settler.settle()
        return str(found["label"])

    async def upload_file(self, x: float, y: float, file: Upload) -> str:
        """Give ``file`` -- its bytes, never a path the browser would open later -- to the file input
        at (x, y) (in a frame or a shadow root too, or the one a label there controls), or to the
        file chooser a click there opens (an upload button)."""
        await self._settler.before_action()
        target = await self.guard(locate(self._state.page, x, y))
        field = None
        if target.element is not None:
            field = (await self.guard(target.element.evaluate_handle(FILE_INPUT_OF))).as_element()
        if field is not None:
            payload = FilePayload(name=file.name, mimeType=file.mime_type, buffer=file.data)
            await self.guard(field.set_input_files(payload, timeout=self._settler.settle_ms()))
        else:
            await self.guard(self._give_to_chooser(x, y, file))
        await self._settler.settle()
        return f"ok, gave the file {file.name!r} to the page"

    async def _give_to_chooser(self, x: float, y: float, file: Upload) -> None:
        """Click at (x, y) and give ``file`` to the file chooser the click opens, through the
        session's own CDP session (which intercepts choosers: ``faults``): the chooser's input is
        given a file made of the bytes; ActionError when none opens within the settle time."""
        cdp = await self._state.cdp_session()
        with self._faults.expecting_chooser() as chooser:
            await self._click(x, y)
            try:
                async with asyncio.timeout(max(self._state.config.settle_timeout_s, 1.0)):
                    opened = await chooser
            except TimeoutError:
                raise ActionError(
                    "no file chooser opened there: point at the file input or the upload button"
                ) from None
        node = opened.get("backendNodeId")
        if node is None:
            raise ActionError("the file chooser that opened belongs to no file input the agent can fill")
        found = await cdp.send("DOM.resolveNode", {"backendNodeId": node})
        data = base64.b64encode(file.data).decode("ascii")
        call = {
            "objectId": found["object"]["objectId"],
            "functionDeclaration": GIVE_FILE,
            "arguments": [{"value": file.name}, {"value": file.mime_type}, {"value": data}],
            "awaitPromise": False,
        }
        reply = await cdp.send("Runtime.callFunctionOn", call)
        if "exceptionDetails" in reply:
            raise ActionError("the page refused the file given to its file chooser")

    async def wait(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        await self._settler.settle(next_frame=True)

    async def guard(self, awaitable: Any) -> Any:
        """Turn Playwright failures during an action into ActionError (or BrowserCrashError if gone)."""
        state = self._state
        timeout_s = state.config.command_timeout_s
        try:
            return await within(awaitable, timeout_s, "the action")
        except PlaywrightTimeoutError as exc:
            seconds = timeout_s if isinstance(exc, CommandTimeout) else state.config.settle_timeout_s
            if isinstance(exc, CommandTimeout):  # the page, or the whole browser? (BrowserTimeoutError)
                await state.browser_answers(f"the action got no answer within {seconds:g} s")
            raise ActionError(f"the page did not respond within {seconds:g} s") from None
        except PlaywrightError as exc:
            if state.crashed:
                raise ActionError("the page crashed during the action (its renderer process died)") from None
            if state.target_closed(exc):
                if state.browser_crashed:
                    raise BrowserCrashError(f"the browser is gone: {first_line(exc)}") from None
                if await self._tabs.closed_itself():
                    return None  # the action closed its own tab (window.close()): settle() moves on
            if state.page.is_closed() and not state.context.pages:
                raise BrowserCrashError(f"the browser page is gone: {first_line(exc)}") from None
            raise ActionError(first_line(exc)) from None


async def _both(first: asyncio.Event, second: asyncio.Event) -> None:
    await first.wait()
    await second.wait()


def _documents(frame: Frame) -> list[str]:
    """The URLs of ``frame``'s document and of every document above it, up to the tab's top one."""
    urls: list[str] = []
    current: Frame | None = frame
    while current is not None:
        urls.append(current.url)
        current = current.parent_frame
    return urls
