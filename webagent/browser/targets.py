"""The navigation guard on every target of a context, over a browser's direct DevTools connection.

A page is not the only thing that makes requests: its out-of-process frames, its dedicated
workers, shared and service workers and the tabs it opens are each their own DevTools *target*,
and a CDP ``Fetch`` interception only sees the requests of the target it was enabled on.
``TargetWatcher`` (one per connection, ``webagent.browser.devtools``) uses a session of its own on
the browser target: browser-level auto-attach with ``waitForDebuggerOnStart``, so that each new
page, shared worker and service worker of a guarded context gets a ``TargetInterception``
(``webagent.browser.interception``) before it is resumed, and each page and frame auto-attaches its
own children (out-of-process frames, dedicated workers) the same way. Targets of contexts nobody
guards are let go at once.

Playwright resumes a new tab without waiting for us, so the watcher also pauses document requests
at the browser level: the navigations of pages and out-of-process frames are judged there, every
hop (the target's own interception lets them pass), and a new tab's first navigation waits until
the tab's own interception is in place, so that nothing its document loads escapes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any

import structlog
from playwright.async_api import Error as PlaywrightError

from .devsession import DevToolsSession
from .devtools import DevTools
from .interception import DOCUMENTS, PARENTS, TargetInterception, send_quietly, spawn
from .refusals import PolicyJudge

__all__ = ["TargetWatcher"]

log = structlog.get_logger("webagent.browser")

#: What the browser-level auto-attach takes (frames and dedicated workers come through their parents).
_ROOT_FILTER = [{"type": "page"}, {"type": "shared_worker"}, {"type": "service_worker"}, {"exclude": True}]


class _Target:
    __slots__ = ("context_id", "interception", "parent", "session", "top")

    def __init__(
        self, session: DevToolsSession, interception: TargetInterception, context_id: str, parent: _Target | None
    ) -> None:
        self.session = session
        self.interception = interception
        self.context_id = context_id
        self.parent = parent
        self.top: TargetInterception | None = None  # its own documents, judged at the browser level


class TargetWatcher:
    """Every target of the guarded contexts of one browser, over its direct DevTools connection."""

    def __init__(self, devtools: DevTools) -> None:
        self._devtools = devtools
        # By context id, the guards installed on it, the last one in force (a run's driver on a page
        # another run's session guards: its own guard until it lets go). Weak: a session dropped
        # without closing leaves nothing behind.
        self._guards: dict[str, list[weakref.ref[PolicyJudge]]] = {}
        self._targets: dict[str, _Target] = {}  # target id -> the interception on it
        self._frames: dict[str, _Target] = {}  # page and frame targets, by their main frame id
        self._browser: DevToolsSession | None = None  # a session of our own on the browser target
        self._started: asyncio.Future[DevToolsSession] | None = None

    @classmethod
    def of(cls, devtools: DevTools) -> TargetWatcher:
        watcher = _WATCHERS.get(devtools)
        if watcher is None:
            watcher = _WATCHERS[devtools] = cls(devtools)
        return watcher

    async def start(self) -> DevToolsSession:
        """A session on the browser target with auto-attach and document interception, once per
        connection (its own session: the attachments of other sessions are not its business)."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        return await asyncio.shield(self._started)

    async def _start(self) -> DevToolsSession:
        devtools = self._devtools
        try:
            reply = await devtools.request("Target.attachToBrowserTarget", {})
            browser = self._browser = devtools.adopt(str(reply["sessionId"]))
            browser.on("Target.attachedToTarget", lambda event: self._attached(event, None))
            browser.on("Target.detachedFromTarget", lambda event: self._detached(str(event.get("targetId", ""))))
            browser.on("Fetch.requestPaused", self._root_paused)
            await browser.send("Fetch.enable", {"patterns": DOCUMENTS})
            auto = {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True, "filter": _ROOT_FILTER}
            await browser.send("Target.setAutoAttach", auto)
        except BaseException:
            self._started = None  # the next guard tries again
            raise
        return browser

    def _guard_of(self, context_id: str) -> PolicyJudge | None:
        """The guard in force on ``context_id`` (the last one installed that still exists)."""
        live = [ref for ref in self._guards.get(context_id, []) if ref() is not None]
        if live:
            self._guards[context_id] = live
            return live[-1]()
        self._guards.pop(context_id, None)
        return None

    async def add(self, context_id: str, guard: PolicyJudge) -> None:
        """Guard the context ``context_id``: its targets now and every one it gets from now on."""
        self._guards.setdefault(context_id, []).append(weakref.ref(guard))
        browser = await self.start()
        await self._retarget(context_id)
        reply = await browser.send("Target.getTargets", {})
        existing = [
            info
            for info in reply.get("targetInfos", [])
            if info.get("browserContextId") == context_id
            and info.get("type") in ("page", "shared_worker", "service_worker")
            and info.get("targetId") not in self._targets
        ]
        # Each arrives as an attachedToTarget event (before the answer), as an auto-attached one does.
        attaching = [
            browser.send("Target.attachToTarget", {"targetId": i["targetId"], "flatten": True}) for i in existing
        ]
        await asyncio.gather(*attaching, return_exceptions=True)

    async def remove(self, context_id: str, guard: PolicyJudge) -> None:
        """``guard`` lets go of ``context_id`` (its run is over): the guard installed before it is in
        force again, or, when there is none, the context's sessions are detached."""
        self._guards[context_id] = [r for r in self._guards.get(context_id, []) if r() is not guard]
        if self._guard_of(context_id) is not None:
            await self._retarget(context_id)
            return
        gone = [t for t in self._targets.values() if t.context_id == context_id]
        for target in gone:
            self._forget(target)
        # Those the browser session attached; their children go with them.
        if self._browser is not None:
            ids = [t.session.session_id for t in gone if t.parent is None]
            await asyncio.gather(
                *(self._browser.send("Target.detachFromTarget", {"sessionId": i}) for i in ids), return_exceptions=True
            )

    async def _retarget(self, context_id: str) -> None:
        """Put the guard in force on ``context_id`` on the interceptions of its targets."""
        guard = self._guard_of(context_id)
        if guard is None:
            return
        sending = []
        for target in [t for t in self._targets.values() if t.context_id == context_id]:
            if target.interception.guard is not guard:
                target.interception.guard = guard
                if target.top is not None:
                    target.top.guard = guard
                sending += target.interception.commands()  # its patterns and WebSocket rules
        await asyncio.gather(*sending, return_exceptions=True)

    # -- targets --------------------------------------------------------------------------
    def _attached(self, event: dict[str, Any], parent: _Target | None) -> None:
        info = event["targetInfo"]
        session = self._devtools.adopt(str(event["sessionId"]))
        waiting = bool(event.get("waitingForDebugger"))
        context_id = parent.context_id if parent is not None else str(info.get("browserContextId", ""))
        guard = self._guard_of(context_id)
        target_id = str(info.get("targetId", ""))
        if guard is None or target_id in self._targets:  # not ours to guard (or attached twice): let go of it
            send_quietly(session, "Runtime.runIfWaitingForDebugger", {})
            owner = parent.session if parent is not None else self._browser
            if owner is not None:
                send_quietly(owner, "Target.detachFromTarget", {"sessionId": session.session_id})
            return
        kind = str(info.get("type", ""))
        framed = kind in ("page", "iframe")
        interception = TargetInterception(
            guard,
            session,
            kind,
            main_frame_id=target_id if framed else "",
            top_documents=False,
            popup=kind == "page" and bool(info.get("openerId")),
        )
        target = _Target(session, interception, context_id, parent)
        self._targets[target_id] = target
        if framed and self._browser is not None:
            target.top = TargetInterception(
                guard, self._browser, kind, main_frame_id=target_id, popup=interception.popup
            )
            self._frames[target_id] = target
        session.on("Target.attachedToTarget", lambda child: self._attached(child, target))
        session.on("Target.detachedFromTarget", lambda child: self._detached(str(child.get("targetId", ""))))
        spawn(self._set_up(target, kind, waiting))

    async def _set_up(self, target: _Target, kind: str, waiting: bool) -> None:
        session = target.session
        commands = target.interception.commands()
        if kind in PARENTS:
            children = {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True}
            commands.append(session.send("Target.setAutoAttach", children))
        try:
            await asyncio.gather(*commands)
        except PlaywrightError as exc:  # the target went away meanwhile
            log.debug("guard_target_not_set_up", kind=kind, error=str(exc))
        finally:
            target.interception.ready.set()
        if waiting:
            send_quietly(session, "Runtime.runIfWaitingForDebugger", {})

    def _detached(self, target_id: str) -> None:
        target = self._targets.get(target_id)
        if target is not None:
            self._forget(target)

    def _forget(self, target: _Target) -> None:
        for table in (self._targets, self._frames):
            for key in [k for k, v in table.items() if v is target]:
                del table[key]

    # -- documents, at the browser level ----------------------------------------------------
    def _root_paused(self, event: dict[str, Any]) -> None:
        frame_id = str(event.get("frameId", ""))
        target = self._frames.get(frame_id)
        if target is None or target.top is None:  # a frame inside a page (judged there), or not guarded
            if self._browser is not None:
                send_quietly(self._browser, "Fetch.continueRequest", {"requestId": event["requestId"]})
            return
        spawn(self._judge_top(target, event, frame_id))

    async def _judge_top(self, target: _Target, event: dict[str, Any], frame_id: str) -> None:
        if not target.interception.ready.is_set():
            # A new tab's first navigation: once the tab's own interception is in place, so that
            # nothing the new document loads escapes it.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._devtools.timeout_s):
                    await target.interception.ready.wait()
        assert target.top is not None
        target.top.judge(event, document=True, frame_id=frame_id)


_WATCHERS: weakref.WeakKeyDictionary[DevTools, TargetWatcher] = weakref.WeakKeyDictionary()
