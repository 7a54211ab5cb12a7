"""How much of the environment server one client may hold: sessions at once, per client and in all,
and the size of what it sends.

A session is what holds a browser context: a ``/ws`` connection (openenv-core's session, one
``WebEnv``) for as long as it is open, and a plain-HTTP ``POST /reset``, ``/step`` or ``/mcp``
(openenv-core's stateless forms, an environment per request) while it runs. A client is who the gate says it is
(``webagent.serving.gate.client_of``): its token when the server holds several, else its peer
address. Refused: a ``/ws`` session is accepted, and its first message answered openenv-core's own capacity
error (``{"type": "error", "data": {"code": "CAPACITY_REACHED", ...}}``, which its clients raise),
then closed; an HTTP request gets ``429`` with FastAPI's ``{"detail": "..."}``. A session whose client
has closed it still holds its context until the environment has closed it; a new one that only its end
would make room for waits for that end (at most ``CLOSING_WAIT_S``) instead of being refused, and one
that would be refused waits ``DISCONNECT_GRACE_S`` for such a close to arrive (the client's close
handshake can end before its session hears of it), so a client that closes a session and opens
another at once is never told the server is full; where only plain-HTTP sessions hold the bound
(no close can be on its way) it is refused at once. A client that goes away
without closing its session is no error of the server's (nothing of it reaches the log but a debug
line). A request body over
``max_body`` bytes gets ``413`` (bodies are read ahead, so nothing behind sees a partial one); a
WebSocket message over it is refused by the server itself (``uvicorn``'s ``ws_max_size``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter

import structlog
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocketDisconnect

from ..serving.gate import client_of

__all__ = ["MAX_BODY", "SessionBounds"]

log = structlog.get_logger("webagent.env")

#: The largest request body or WebSocket message a client may send (bytes): a reset or a step.
MAX_BODY = 8 << 20
_HTTP_SESSIONS = frozenset({"/reset", "/step", "/mcp"})
_FIRST_MESSAGE_S = 30.0  # how long a refused session waits for the message its error answers
#: How long a new session waits for the sessions its clients closed to be given back (their contexts closed).
CLOSING_WAIT_S = 15.0
#: How long a session the bounds refuse waits for a close already on its way: a client that closed its
#: socket and opened another at once may be here before the old one's disconnect reached its session.
DISCONNECT_GRACE_S = 2.0


class SessionBounds:
    """The ASGI app in front of the OpenEnv app that counts and bounds sessions (the module docstring)."""

    def __init__(self, app: ASGIApp, *, total: int, per_client: int, max_body: int = MAX_BODY) -> None:
        self.app = app
        self.total = total
        self.per_client = per_client
        self.max_body = max_body
        self.open: Counter[str] = Counter()
        #: Of ``open``: the sessions whose client has closed them, still closing their contexts.
        self.closing: Counter[str] = Counter()
        #: Of ``open``: the ``/ws`` sessions (only they are closed by a message that may be on its way).
        self.sockets: Counter[str] = Counter()
        self._changed: asyncio.Event | None = None

    @property
    def sessions(self) -> int:
        return sum(self.open.values())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            body = await self._body(scope, receive)
            if body is None:
                detail = f"the request body is larger than {self.max_body} bytes, the most a reset or a step may send"
                await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)
                return
            receive = _replay(body, receive)
        counted = (kind == "websocket" and scope.get("path") == "/ws") or (
            kind == "http" and scope.get("method") == "POST" and scope.get("path") in _HTTP_SESSIONS
        )
        if not counted:
            await self._app(scope, receive, send)
            return
        client = client_of(scope)
        refusal = await self._admit(client)
        if refusal is not None:
            log.warning("env_session_refused", client=client, reason=refusal)
            await self._refuse(scope, receive, send, refusal)
            return
        self.open[client] += 1
        socket = kind == "websocket"
        if socket:
            self.sockets[client] += 1
        closed = False

        async def watched() -> Message:
            nonlocal closed
            message = await receive()
            if message["type"] == "websocket.disconnect" and not closed:
                closed = True
                self.closing[client] += 1
                if self._changed is not None:  # a session waiting in its grace: room is coming
                    self._changed.set()
            return message

        try:
            await self._app(scope, watched if kind == "websocket" else receive, send)
        finally:
            _take(self.open, client)
            if socket:
                _take(self.sockets, client)
            if closed:
                _take(self.closing, client)
            if self._changed is not None:
                self._changed.set()

    async def _admit(self, client: str) -> str | None:
        """None when the session may open: at once, or once the closed sessions that make room for it
        are given back (at most ``CLOSING_WAIT_S``; a close still on its way, ``DISCONNECT_GRACE_S``,
        where a ``/ws`` session holds the bound); else why it is refused."""
        loop = asyncio.get_running_loop()
        deadline, grace = loop.time() + CLOSING_WAIT_S, loop.time() + DISCONNECT_GRACE_S
        while (refusal := self._refusal(client)) is not None:
            if self._room_coming(client):
                remaining = deadline - loop.time()
            elif self._close_may_come(client):
                remaining = grace - loop.time()
            else:  # only plain-HTTP sessions hold the bound: no close can be on its way
                break
            if remaining <= 0:
                break
            if self._changed is None:
                self._changed = asyncio.Event()
            changed = self._changed
            changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await changed.wait()
        return refusal

    def _room_coming(self, client: str) -> bool:
        """Whether a session being closed would lift the bound that refuses ``client`` now."""
        if self.open[client] >= self.per_client:
            return self.closing[client] > 0
        return sum(self.closing.values()) > 0

    def _close_may_come(self, client: str) -> bool:
        """Whether a ``/ws`` session not known to be closing holds the bound that refuses ``client``
        (its client may have closed it already, its disconnect not here yet)."""
        if self.open[client] >= self.per_client:
            return self.sockets[client] > self.closing[client]
        return sum(self.sockets.values()) > sum(self.closing.values())

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            # openenv-core closes a session's socket in a ``finally`` that raises when its client went
            # away without saying so (a trainer killed, a dropped network): no fault of the server's.
            if scope["type"] != "websocket":
                raise
            log.debug("env_client_went_away", client=client_of(scope))

    def _refusal(self, client: str) -> str | None:
        if self.open[client] >= self.per_client:
            return (
                f"this client holds {self.open[client]} sessions, the most one client may hold "
                f"(--max-sessions-per-client {self.per_client}); close one first"
            )
        if self.sessions >= self.total:
            return f"the server holds {self.sessions} sessions, its most (--max-sessions {self.total}); try again later"
        return None

    async def _body(self, scope: Scope, receive: Receive) -> list[Message] | None:
        """The request's body messages, read ahead (None: larger than ``max_body``)."""
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body:
            return None
        messages: list[Message] = []
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            seen += len(message.get("body", b""))
            if seen > self.max_body:
                return None
            if message["type"] != "http.request" or not message.get("more_body"):
                return messages

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, reason: str) -> None:
        if scope["type"] == "http":
            await JSONResponse({"detail": reason}, status_code=429, headers={"Retry-After": "5"})(scope, receive, send)
            return
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        try:  # the error answers the client's first message, which its client raises
            async with asyncio.timeout(_FIRST_MESSAGE_S):
                message = await receive()
        except TimeoutError:
            message = {"type": "websocket.disconnect"}
        if message["type"] == "websocket.receive":
            error = {"type": "error", "data": {"message": reason, "code": "CAPACITY_REACHED"}}
            await send({"type": "websocket.send", "text": json.dumps(error)})
            await send({"type": "websocket.close", "code": 1013})


def _take(counts: Counter[str], client: str) -> None:
    counts[client] -= 1
    if counts[client] <= 0:
        del counts[client]


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that hands the body read ahead first, then what the connection says next."""
    queued = list(messages)

    async def replayed() -> Message:
        return queued.pop(0) if queued else await receive()

    return replayed
