"""The navigation guard on a page's children without a direct DevTools connection.

Playwright's CDP sessions exist for pages and frames only, and drop the messages of any session
they did not make: flat auto-attach through one is of no use. Below the browser level Chromium
still offers the non-flat protocol: ``TunnelledChildren`` auto-attaches a target's children (its
out-of-process frames, dedicated workers, theirs in turn) through its own session with
``waitForDebuggerOnStart``, each one's commands and events carried in ``Target.sendMessageToTarget``
and ``Target.receivedMessageFromTarget``, and puts a ``TargetInterception`` on each before it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from typing import Any

import structlog
from playwright.async_api import Error as PlaywrightError

from .deadline import CommandTimeout
from .devsession import CDPChannel
from .interception import PARENTS, TargetInterception, spawn
from .refusals import PolicyJudge

__all__ = ["TunnelledChildren"]

log = structlog.get_logger("webagent.browser")


class _Tunnel:
    """A child target's session reached through its parent's CDP session (non-flat protocol)."""

    def __init__(self, parent: CDPChannel, session_id: str, timeout_s: float) -> None:
        self._parent = parent
        self.session_id = session_id
        self._timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._handlers: dict[str, list[Any]] = {}

    async def send(self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> Any:
        key = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        message = json.dumps({"id": key, "method": method, "params": params or {}})
        try:
            async with asyncio.timeout(timeout_s or self._timeout_s):
                await self._parent.send(
                    "Target.sendMessageToTarget", {"sessionId": self.session_id, "message": message}
                )
                return await future
        except TimeoutError:
            raise CommandTimeout(f"{method}: no answer from the browser") from None
        finally:
            self._pending.pop(key, None)

    def on(self, event: str, f: Any) -> None:
        self._handlers.setdefault(event, []).append(f)

    async def detach(self) -> None:
        with contextlib.suppress(PlaywrightError):
            await self._parent.send("Target.detachFromTarget", {"sessionId": self.session_id})

    def deliver(self, text: str) -> None:
        message = json.loads(text)
        future = self._pending.get(message.get("id", -1))
        if future is not None:
            if future.done():
                return
            if "error" in message:
                future.set_exception(PlaywrightError(f"{message['error'].get('message', message['error'])}"))
            else:
                future.set_result(message.get("result", {}))
            return
        for handler in self._handlers.get(str(message.get("method", "")), ()):
            try:
                handler(message.get("params", {}))
            except Exception:  # a handler's bug must not stop the others
                log.exception("tunnel_handler_failed", cdp_event=message.get("method"))


class TunnelledChildren:
    """The children of a target (its out-of-process frames, dedicated workers, theirs in turn)
    auto-attached through its own CDP session -- a Playwright one, where there is no direct
    connection -- each intercepted like it before it runs."""

    def __init__(self, guard: PolicyJudge, channel: CDPChannel, timeout_s: float) -> None:
        self._guard = guard
        self._channel = channel
        self._timeout_s = timeout_s
        self._tunnels: dict[str, _Tunnel] = {}

    async def start(self) -> None:
        self._channel.on("Target.attachedToTarget", self._attached)
        self._channel.on("Target.receivedMessageFromTarget", self._received)
        self._channel.on("Target.detachedFromTarget", lambda e: self._tunnels.pop(str(e.get("sessionId")), None))
        auto = {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": False}
        await self._channel.send("Target.setAutoAttach", auto)

    def _received(self, event: dict[str, Any]) -> None:
        tunnel = self._tunnels.get(str(event.get("sessionId", "")))
        if tunnel is not None:
            tunnel.deliver(str(event.get("message", "{}")))

    def _attached(self, event: dict[str, Any]) -> None:
        info = event["targetInfo"]
        kind = str(info.get("type", ""))
        tunnel = self._tunnels[str(event["sessionId"])] = _Tunnel(
            self._channel, str(event["sessionId"]), self._timeout_s
        )
        main_frame = str(info.get("targetId", "")) if kind == "iframe" else ""
        interception = TargetInterception(self._guard, tunnel, kind, main_frame_id=main_frame)
        spawn(self._set_up(tunnel, interception, kind, bool(event.get("waitingForDebugger"))))

    async def _set_up(self, tunnel: _Tunnel, interception: TargetInterception, kind: str, waiting: bool) -> None:
        try:
            await interception.start()
            if kind in PARENTS:
                await TunnelledChildren(self._guard, tunnel, self._timeout_s).start()
        except PlaywrightError as exc:  # the target went away meanwhile
            log.debug("guard_target_not_set_up", kind=kind, error=str(exc))
        if waiting:
            with contextlib.suppress(PlaywrightError):
                await tunnel.send("Runtime.runIfWaitingForDebugger")
