"""The navigation guard on one DevTools target: every request it makes, judged.

``TargetInterception`` puts a CDP ``Fetch`` interception on one target's session (a page, an
out-of-process frame, a shared or service worker; a dedicated worker's requests are its frame's)
and answers each paused request with the policy's verdict (``PolicyJudge.verdict``): first hops,
redirect hops and the hops of a loader Chromium restarts alike. Only document requests are paused
in navigation-only mode. On pages and frames it also sets the WebSocket rules
(``netrules.websocket_conditions``), which hold for their dedicated workers too.

Who puts it on which target: ``targets.TargetWatcher`` (every target of a context, over a
browser's direct DevTools connection) and ``tunnels.TunnelledChildren`` (a page's children through
a Playwright CDP session); ``guard.NavigationGuard`` decides which.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

from playwright.async_api import Error as PlaywrightError

from .devsession import CDPChannel, DevToolsSession
from .netrules import websocket_conditions
from .refusals import PolicyJudge

__all__ = ["DOCUMENTS", "FETCHING", "PARENTS", "TargetInterception", "send_quietly", "spawn"]

#: Targets with requests of their own (dedicated workers' requests are their frame's).
FETCHING = {"page", "iframe", "shared_worker", "service_worker"}
#: Targets whose children (frames, dedicated workers) are attached like them.
PARENTS = {"page", "iframe", "worker"}
DOCUMENTS = [{"urlPattern": "*", "resourceType": "Document", "requestStage": "Request"}]
_EVERYTHING = [{"urlPattern": "*", "requestStage": "Request"}]
_TASKS: set[asyncio.Future[Any]] = set()


def spawn(awaitable: Awaitable[Any]) -> None:
    """Run ``awaitable`` in the background, kept until it ends."""
    task = asyncio.ensure_future(awaitable)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


def _ignore(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def send_quietly(channel: CDPChannel, method: str, params: dict[str, Any]) -> None:
    """A command whose answer nobody waits for (its failure: the target went away)."""
    if isinstance(channel, DevToolsSession):
        channel.request(method, params).add_done_callback(_ignore)
    else:
        spawn(_quietly(channel.send(method, params)))


async def _quietly(awaitable: Awaitable[Any]) -> None:
    with contextlib.suppress(PlaywrightError):
        await awaitable


class TargetInterception:
    """The guard's ``Fetch`` interception and WebSocket rules on one target's CDP session.

    ``main_frame_id``: the target's own frame (a page's or an out-of-process frame's), or "" for
    a worker. ``top_documents``: whether its own document requests are judged here (False when
    the watcher judges them at the browser level). ``popup``: a tab the page opened, whose first
    refused navigation is reported as a refused new tab.
    """

    def __init__(
        self,
        guard: PolicyJudge,
        channel: CDPChannel,
        kind: str,
        *,
        main_frame_id: str = "",
        top_documents: bool = True,
        popup: bool = False,
    ) -> None:
        self.guard = guard
        self.channel = channel
        self.kind = kind
        self.main_frame_id = main_frame_id
        self.top_documents = top_documents
        self.popup = popup  # until a navigation after its first one
        self._first_hop: str | None = None  # the request id of the first navigation's last hop
        self.ready = asyncio.Event()  # its interception is in place
        self._listening = False
        self._conditions = False  # WebSocket rules are set (to be cleared when a guard without any takes over)

    def commands(self) -> list[Awaitable[Any]]:
        """The commands that put the interception of the current ``guard`` in place (sent together;
        sent again when another guard takes over the target)."""
        channel = self.channel
        sent: list[Awaitable[Any]] = []
        if self.kind in FETCHING:
            if not self._listening:
                channel.on("Fetch.requestPaused", self.on_paused)
                self._listening = True
            patterns = _EVERYTHING if self.guard.every_request else DOCUMENTS
            sent.append(channel.send("Fetch.enable", {"patterns": patterns}))
        conditions = websocket_conditions(self.guard.policy) if self.kind in ("page", "iframe") else []
        if conditions or self._conditions:
            rules = {"matchedNetworkConditions": conditions}
            sent.append(channel.send("Network.emulateNetworkConditionsByRule", rules))
            self._conditions = bool(conditions)
        return sent

    async def start(self) -> None:
        """Put the interception in place (a PlaywrightError when the target went away)."""
        try:
            await asyncio.gather(*self.commands())
        finally:
            self.ready.set()

    # -- each request ---------------------------------------------------------------------
    def on_paused(self, event: dict[str, Any]) -> None:
        request_id = str(event["requestId"])
        document = event.get("resourceType") == "Document"
        frame_id = str(event.get("frameId", ""))
        if document and not self.top_documents and frame_id == self.main_frame_id:
            send_quietly(self.channel, "Fetch.continueRequest", {"requestId": request_id})  # judged by the watcher
            return
        self.judge(event, document=document, frame_id=frame_id)

    def judge(self, event: dict[str, Any], *, document: bool, frame_id: str) -> None:
        url = str(event["request"]["url"])
        verdict = self.guard.verdict(url, navigation=document)
        if isinstance(verdict, str) or verdict is None:
            self.answer(event, verdict, document=document, frame_id=frame_id)
        else:
            spawn(self._answer_later(event, verdict, document=document, frame_id=frame_id))

    async def _answer_later(
        self, event: dict[str, Any], verdict: Awaitable[str | None], *, document: bool, frame_id: str
    ) -> None:
        self.answer(event, await verdict, document=document, frame_id=frame_id)

    def _first_navigation(self, event: dict[str, Any], *, document: bool, own_frame: bool) -> bool:
        """Whether ``event`` is a hop of a new tab's first navigation (its first request, or a
        redirect of one), which a refusal reports as a refused new tab."""
        if not (self.popup and document and own_frame):
            return False
        redirected = event.get("redirectedRequestId")
        if self._first_hop is None or (redirected and redirected == self._first_hop):
            self._first_hop = str(event["requestId"])
            return True
        self.popup = False  # a navigation after the first one
        return False

    def answer(self, event: dict[str, Any], reason: str | None, *, document: bool, frame_id: str) -> None:
        request_id = str(event["requestId"])
        url = str(event["request"]["url"])
        own_frame = bool(self.main_frame_id) and frame_id == self.main_frame_id
        first = self._first_navigation(event, document=document, own_frame=own_frame)
        if reason is None:
            send_quietly(self.channel, "Fetch.continueRequest", {"requestId": request_id})
            return
        # An aborted navigation leaves the page where it was; a new tab whose first navigation is
        # merely aborted never finishes opening, so it gets an error page (and is closed).
        error = "Aborted" if document and own_frame and not first else "BlockedByClient"
        send_quietly(self.channel, "Fetch.failRequest", {"requestId": request_id, "errorReason": error})
        if not document:
            self.guard.refused_request(url, reason)
        elif first:
            self.guard.refused_new_tab(url, reason)
        elif own_frame and self.kind == "page":
            self.guard.refused_navigation(url, reason, frame_id, redirect=bool(event.get("redirectedRequestId")))
        else:
            self.guard.refused_frame(url, reason, frame_id)
