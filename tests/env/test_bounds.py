"""``SessionBounds`` at the ASGI level, with an environment app whose sessions take a while to close
after their client has gone (as a browser context does): a session closed and another opened at once
is admitted once the first is given back, never refused as over the bound."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Receive, Scope, Send

from webagent.env.bounds import SessionBounds


class SlowToClose:
    """An app whose WebSocket sessions hold their context ``close_s`` after their client went away."""

    def __init__(self, close_s: float) -> None:
        self.close_s = close_s
        self.admitted = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "websocket"
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        self.admitted += 1
        while (await receive())["type"] != "websocket.disconnect":
            pass
        await asyncio.sleep(self.close_s)  # the context closing


class Connection:
    """One WebSocket connection driven by hand: what the client sends, what the server sent it."""

    def __init__(self, app: SessionBounds) -> None:
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.sent: list[Message] = []
        self.answered = asyncio.Event()
        scope: Scope = {"type": "websocket", "path": "/ws", "client": ("127.0.0.1", 5000), "headers": []}
        self.inbox.put_nowait({"type": "websocket.connect"})
        self.task = asyncio.create_task(app(scope, self.inbox.get, self._send))

    async def _send(self, message: Message) -> None:
        self.sent.append(message)
        self.answered.set()

    def say(self, text: str) -> None:
        self.inbox.put_nowait({"type": "websocket.receive", "text": text})

    def close(self) -> None:
        self.inbox.put_nowait({"type": "websocket.disconnect", "code": 1000})


async def accepted(connection: Connection) -> None:
    await connection.answered.wait()
    assert connection.sent[0]["type"] == "websocket.accept"


async def test_a_session_closed_makes_room_for_the_next_once_given_back() -> None:
    app = SlowToClose(close_s=0.3)
    bounds = SessionBounds(app, total=1, per_client=1)
    first = Connection(bounds)
    await accepted(first)
    first.close()
    await asyncio.sleep(0)  # the disconnect reaches the app: the session is closing, not yet given back
    second = Connection(bounds)
    second.say("reset")
    await asyncio.wait_for(accepted(second), 10)
    await asyncio.wait_for(first.task, 10)
    second.close()
    await asyncio.wait_for(second.task, 10)
    assert app.admitted == 2  # the second was let in, not answered with CAPACITY_REACHED
    assert not any("CAPACITY_REACHED" in str(m.get("text")) for m in second.sent), second.sent
    assert not bounds.open and not bounds.closing


async def test_a_session_still_open_is_no_room_the_next_is_refused() -> None:
    app = SlowToClose(close_s=0.0)
    bounds = SessionBounds(app, total=1, per_client=1)
    first = Connection(bounds)
    await accepted(first)
    second = Connection(bounds)
    second.say("reset")
    await asyncio.wait_for(second.task, 10)  # refused once its grace is over: nothing is closing
    assert any("CAPACITY_REACHED" in str(m.get("text")) for m in second.sent), second.sent
    assert app.admitted == 1
    first.close()
    await asyncio.wait_for(first.task, 10)


async def test_a_close_still_on_its_way_makes_room_too() -> None:
    """The client's close handshake ended, but its session has not heard of it yet when the next
    session comes: that one waits for the disconnect (``DISCONNECT_GRACE_S``), then for the context."""
    app = SlowToClose(close_s=0.1)
    bounds = SessionBounds(app, total=1, per_client=1)
    first = Connection(bounds)
    await accepted(first)
    second = Connection(bounds)
    second.say("reset")
    await asyncio.sleep(0.2)  # the second is at the door before the first's disconnect arrives
    first.close()
    await asyncio.wait_for(accepted(second), 10)
    await asyncio.wait_for(first.task, 10)
    second.close()
    await asyncio.wait_for(second.task, 10)
    assert app.admitted == 2 and not any("CAPACITY_REACHED" in str(m.get("text")) for m in second.sent), second.sent


class HeldSteps:
    """An app whose plain-HTTP ``POST /step`` runs until ``release`` is set."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        self.entered.set()
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def post(app: SessionBounds, path: str) -> list[Message]:
    """A plain-HTTP ``POST path`` with an empty body: the messages the server sent back."""
    sent: list[Message] = []
    scope: Scope = {"type": "http", "method": "POST", "path": path, "client": ("127.0.0.1", 5000), "headers": []}
    bodies = iter([{"type": "http.request", "body": b"", "more_body": False}])

    async def receive() -> Message:
        return next(bodies, {"type": "http.disconnect"})

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_where_only_plain_http_sessions_hold_the_bound_no_close_is_awaited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No disconnect can be on its way for a plain-HTTP session: the next one is refused at once,
    not after the grace a ``/ws`` session's close gets."""
    monkeypatch.setattr("webagent.env.bounds.DISCONNECT_GRACE_S", 600.0)
    app = HeldSteps()
    bounds = SessionBounds(app, total=1, per_client=1)
    held = asyncio.create_task(post(bounds, "/step"))
    await asyncio.wait_for(app.entered.wait(), 10)
    refused = await asyncio.wait_for(post(bounds, "/reset"), 30)  # not the 600 s grace
    assert refused[0]["status"] == 429, refused
    app.release.set()
    assert (await asyncio.wait_for(held, 10))[0]["status"] == 200
    assert not bounds.open and not bounds.sockets
