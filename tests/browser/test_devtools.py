"""The direct DevTools connection: sessions use it when the browser offers one, fall back to
Playwright's CDP sessions when not, and fail commands cleanly when a page or browser goes away.
The WebSocket framing is tested without a browser against a fake transport."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, async_playwright
from playwright.async_api import Error as PlaywrightError

from webagent.agent import Agent
from webagent.browser import devtools, launcher
from webagent.browser.deadline import BoundedCDPSession
from webagent.browser.devtools import DevTools, DevToolsError, DevToolsSession, devtools_for, free_port
from webagent.browser.launcher import launch_browser
from webagent.browser.session import BrowserSession
from webagent.config import PROFILES, AgentConfig, BrowserConfig
from webagent.images import frame_for

COUNTER = (
    "data:text/html,<title>0</title><body style='margin:0'><button style='width:400px;height:300px' "
    "onclick='document.title = String(+document.title + 1)'>count</button></body>"
)


@pytest.fixture
async def fresh_browser() -> AsyncIterator[tuple[Browser, BrowserConfig]]:
    config = BrowserConfig()
    async with async_playwright() as playwright:
        browser = await launch_browser(playwright, config)
        try:
            yield browser, config
        finally:
            await browser.close()


# -- with a browser -------------------------------------------------------------------------------
@pytest.mark.browser
async def test_a_launched_browser_gives_sessions_a_direct_connection(browser: Browser) -> None:
    config = BrowserConfig()
    session = await BrowserSession.create(browser, config)
    try:
        await session.goto(COUNTER, start=True)
        for _ in range(3):
            await session.click(100, 100)
        assert isinstance(session._state.cdp, DevToolsSession)
        assert await session.title() == "3"  # three clicks, each handled before settle returned
        shot = await session.screenshot(frame_for(1280, 800, PROFILES["holo1.5"]))
        assert base64.b64decode(shot.b64)[:2] == b"\xff\xd8"
        with pytest.raises(DevToolsError, match=r"^No\.such: .*wasn't found") as info:
            await session._state.cdp.send("No.such")
        assert isinstance(info.value, PlaywrightError)  # handled wherever Playwright's errors are
    finally:
        await session.close()


async def assert_playwright_only(config: BrowserConfig) -> None:
    """A browser launched with ``config`` has no direct connection, and its sessions work on
    Playwright's CDP sessions."""
    async with async_playwright() as playwright:
        browser = await launch_browser(playwright, config)
        try:
            assert devtools_for(browser) is None
            session = await BrowserSession.create(browser, config)
            await session.goto(COUNTER, start=True)
            await session.click(100, 100)
            assert isinstance(session._state.cdp, BoundedCDPSession)
            assert await session.title() == "1"
            await session.close()
        finally:
            await browser.close()


@pytest.mark.browser
async def test_direct_cdp_off_means_playwright_only() -> None:
    await assert_playwright_only(BrowserConfig(direct_cdp=False))


@pytest.mark.browser
async def test_a_port_taken_by_something_else_falls_back_to_playwright(monkeypatch: pytest.MonkeyPatch) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()  # not a DevTools server: answers nothing

    squatter = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    taken = squatter.sockets[0].getsockname()[1]
    monkeypatch.setattr(launcher, "free_port", lambda: taken)  # as if it was taken after we chose it
    try:
        await assert_playwright_only(BrowserConfig())
    finally:
        squatter.close()


@pytest.mark.browser
async def test_a_closed_page_fails_its_commands_and_a_closed_browser_all(
    fresh_browser: tuple[Browser, BrowserConfig],
) -> None:
    browser, _ = fresh_browser
    connection = devtools_for(browser)
    assert connection is not None
    context = await browser.new_context()
    page = await context.new_page()
    session = await connection.attach(context, page)
    assert session.session_id in connection.sessions
    pending = session.request("Runtime.evaluate", {"expression": "new Promise(() => {})", "awaitPromise": True})
    await page.close()
    with pytest.raises(DevToolsError, match="has been closed"):
        await asyncio.wait_for(pending, 5)
    assert session.closed and session.session_id not in connection.sessions
    with pytest.raises(DevToolsError, match="has been closed"):
        await session.send("Runtime.evaluate", {"expression": "1"})

    other = await connection.attach(context, await context.new_page())
    hanging = other.request("Runtime.evaluate", {"expression": "new Promise(() => {})", "awaitPromise": True})
    await browser.close()
    with pytest.raises(DevToolsError, match="has been closed"):
        await asyncio.wait_for(hanging, 5)
    assert connection.closed
    assert devtools_for(browser) is None


@pytest.mark.browser
@pytest.mark.parametrize("flag", ["--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1"])
async def test_flags_that_set_up_remote_debugging_are_left_alone(flag: str) -> None:
    config = BrowserConfig(args=[flag.format(port=free_port())])
    async with async_playwright() as playwright:
        browser = await launch_browser(playwright, config)
        try:
            assert devtools_for(browser) is None
        finally:
            await browser.close()


@pytest.mark.browser
async def test_a_lost_connection_moves_open_pages_to_playwright(fresh_browser: tuple[Browser, BrowserConfig]) -> None:
    browser, config = fresh_browser
    session = await BrowserSession.create(browser, config)
    await session.goto(COUNTER, start=True)
    await session.click(100, 100)
    assert isinstance(session._state.cdp, DevToolsSession)
    connection = devtools_for(browser)
    assert connection is not None
    connection.close()  # as after a bad frame: the browser and the page stay
    for _ in range(20):
        if connection.closed:
            break
        await asyncio.sleep(0.05)
    assert devtools_for(browser) is None
    await session.click(100, 100)
    assert isinstance(session._state.cdp, BoundedCDPSession)
    assert await session.title() == "2"
    await session.close()


@pytest.mark.parametrize(
    ("secrets", "browser_section", "direct"),
    [({}, {}, True), ({"PIN": "1234"}, {}, False), ({"PIN": "1234"}, {"direct_cdp": True}, True)],
)
def test_secrets_keep_the_port_closed_unless_asked(
    secrets: dict[str, str], browser_section: dict[str, Any], direct: bool
) -> None:
    config = AgentConfig.model_validate({"secrets": secrets, "browser": browser_section})
    agent = Agent(config, require=())
    assert agent.browsers.config.direct_cdp is direct
    assert config.browser.direct_cdp is True or "direct_cdp" in browser_section  # the config is left as it is


# -- the wire, without a browser ------------------------------------------------------------------
class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.writes = 0
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data
        self.writes += 1

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def server_frame(payload: bytes, opcode: int = 0x1, fin: bool = True, mask: bytes = b"") -> bytes:
    size = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    bit = 0x80 if mask else 0
    if size < 126:
        head += bytes([bit | size])
    elif size < 1 << 16:
        head += bytes([bit | 126]) + size.to_bytes(2, "big")
    else:
        head += bytes([bit | 127]) + size.to_bytes(8, "big")
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload)) if mask else payload
    return head + mask + body


def client_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(opcode, unmasked payload) of each frame the client wrote; every one must be final and masked."""
    frames = []
    while data:
        assert data[0] & 0x80 and data[1] & 0x80
        size, start = data[1] & 0x7F, 2
        if size == 126:
            size, start = int.from_bytes(data[2:4], "big"), 4
        elif size == 127:
            size, start = int.from_bytes(data[2:10], "big"), 10
        mask = data[start : start + 4]
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data[start + 4 : start + 4 + size]))
        frames.append((data[0] & 0x0F, body))
        data = data[start + 4 + size :]
    return frames


@pytest.fixture
async def wire() -> tuple[DevTools, FakeTransport]:
    connection = DevTools()
    transport = FakeTransport()
    connection.connection_made(transport)
    return connection, transport


async def test_commands_are_masked_frames_and_replies_resolve_them(wire: tuple[DevTools, FakeTransport]) -> None:
    connection, transport = wire
    big = "x" * 70_000  # an 8-byte length
    first = connection.request("Runtime.evaluate", {"expression": "1"}, "S1")
    second = connection.request("Runtime.evaluate", {"expression": big})
    sent = [json.loads(body) for _, body in client_frames(bytes(transport.written))]
    assert sent == [
        {"id": 1, "method": "Runtime.evaluate", "params": {"expression": "1"}, "sessionId": "S1"},
        {"id": 2, "method": "Runtime.evaluate", "params": {"expression": big}},
    ]
    reply = json.dumps({"id": 2, "result": {"value": big}}).encode()
    stream = server_frame(reply) + server_frame(b'{"id": 1, "error": {"code": -32000, "message": "nope"}}')
    for i in range(0, len(stream), 1000):  # arriving in pieces
        connection.data_received(stream[i : i + 1000])
    assert (await second) == {"value": big}
    with pytest.raises(DevToolsError, match=r"^Runtime\.evaluate: nope$"):
        await first


async def test_fragments_pings_and_masked_frames(wire: tuple[DevTools, FakeTransport]) -> None:
    connection, transport = wire
    session = DevToolsSession(connection, "S")
    connection.sessions["S"] = session
    seen: list[Any] = []
    session.on("Page.windowOpen", seen.append)
    message = json.dumps({"method": "Page.windowOpen", "params": {"url": "u" * 300}, "sessionId": "S"}).encode()
    connection.data_received(
        server_frame(message[:100], fin=False)
        + server_frame(b"ping!", opcode=0x9)  # a control frame between fragments
        + server_frame(message[100:], opcode=0x0)
        + server_frame(message, mask=b"\x01\x02\x03\x04")
    )
    assert seen == [{"url": "u" * 300}] * 2
    assert client_frames(bytes(transport.written)) == [(0xA, b"ping!")]


async def test_a_failing_handler_does_not_stop_the_reader(wire: tuple[DevTools, FakeTransport]) -> None:
    connection, _ = wire
    session = DevToolsSession(connection, "S")
    connection.sessions["S"] = session
    session.on("Page.windowOpen", lambda _: 1 / 0)
    pending = connection.request("Page.enable", None, "S")
    event = json.dumps({"method": "Page.windowOpen", "params": {}, "sessionId": "S"}).encode()
    connection.data_received(server_frame(event) + server_frame(b'{"id": 1, "result": {}, "sessionId": "S"}'))
    assert await pending == {}


async def test_a_crash_fails_the_sessions_pending_commands(wire: tuple[DevTools, FakeTransport]) -> None:
    connection, _ = wire
    session = DevToolsSession(connection, "S")
    connection.sessions["S"] = session
    mine = session.request("Runtime.evaluate", {"expression": "1"})
    theirs = connection.request("Runtime.evaluate", {"expression": "1"}, "T")
    connection.data_received(server_frame(b'{"method": "Inspector.targetCrashed", "params": {}, "sessionId": "S"}'))
    with pytest.raises(DevToolsError, match="Target crashed"):
        await mine
    assert not theirs.done()


async def test_the_handshake_checks_the_accept_key(wire: tuple[DevTools, FakeTransport]) -> None:
    connection, transport = wire
    upgrading = asyncio.ensure_future(connection._upgrade("127.0.0.1", 9, "/devtools/browser/x"))
    await asyncio.sleep(0)
    assert transport.written.startswith(b"GET /devtools/browser/x HTTP/1.1\r\n")
    connection.data_received(b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: wrong\r\n\r\n")
    with pytest.raises(ConnectionError, match="not a DevTools WebSocket"):
        await upgrading
    assert transport.closed

    good, good_transport = DevTools(), FakeTransport()
    good.connection_made(good_transport)
    upgrading = asyncio.ensure_future(good._upgrade("127.0.0.1", 9, "/devtools/browser/x"))
    await asyncio.sleep(0)
    accept = base64.b64encode(hashlib.sha1(good._key + devtools._GUID).digest())
    frame = server_frame(b'{"method": "Target.targetCreated", "params": {}}')
    good.data_received(b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n" + frame)
    await upgrading  # and the frame right behind the head is read, not lost
    assert not good_transport.closed


async def test_a_lost_connection_fails_everything_pending(wire: tuple[DevTools, FakeTransport]) -> None:
    connection, _ = wire
    session = DevToolsSession(connection, "S")
    connection.sessions["S"] = session
    pending = session.request("Page.enable")
    connection.connection_lost(None)
    with pytest.raises(DevToolsError, match=r"^Page\.enable: .*has been closed"):
        await pending
    assert connection.closed and session.closed
    with pytest.raises(DevToolsError, match="has been closed"):
        await session.send("Page.enable")


async def test_a_click_is_one_write_and_unflushed_commands_go_out_with_the_next(
    wire: tuple[DevTools, FakeTransport],
) -> None:
    connection, transport = wire
    session = DevToolsSession(connection, "S")
    connection.sessions["S"] = session
    clicking = asyncio.ensure_future(session.click(10, 20))
    await asyncio.sleep(0)
    frames = [json.loads(body) for _, body in client_frames(bytes(transport.written))]
    assert transport.writes == 1
    assert [(f["params"]["type"], f["params"]["buttons"]) for f in frames] == [
        ("mouseMoved", 0),
        ("mousePressed", 1),
        ("mouseReleased", 0),
    ]
    assert all(f["params"]["x"] == 10 and f["params"]["y"] == 20 and f["sessionId"] == "S" for f in frames)
    replies = b"".join(server_frame(b'{"id": %d, "result": {}, "sessionId": "S"}' % f["id"]) for f in frames)
    connection.data_received(replies)
    await clicking

    shot = session.request("Page.captureScreenshot", flush=False)
    assert transport.writes == 1  # held back ...
    check = session.request("Runtime.evaluate", {"expression": "1"})
    assert transport.writes == 2  # ... and written with the next command
    assert [json.loads(b)["method"] for _, b in client_frames(bytes(transport.written))][3:] == [
        "Page.captureScreenshot",
        "Runtime.evaluate",
    ]
    alone = session.request("Page.captureScreenshot", flush=False)
    await asyncio.sleep(0)
    assert transport.writes == 3  # nothing followed: out on the next loop turn
    for future in (shot, check, alone):
        future.cancel()


async def test_a_click_on_a_closing_page_fails_once(wire: tuple[DevTools, FakeTransport]) -> None:
    connection, _ = wire
    session = DevToolsSession(connection, "S")
    connection.sessions["S"] = session
    clicking = asyncio.ensure_future(session.click(10, 20))
    await asyncio.sleep(0)
    connection.data_received(server_frame(b'{"method": "Target.detachedFromTarget", "params": {"sessionId": "S"}}'))
    with pytest.raises(DevToolsError, match=r"^Input\.dispatchMouseEvent: .*has been closed"):
        await clicking
    assert session.closed and not connection._pending


async def test_a_crashed_target_fails_new_commands_at_once(wire: tuple[DevTools, FakeTransport]) -> None:
    connection, transport = wire
    session = DevToolsSession(connection, "S")
    connection.sessions["S"] = session
    connection.data_received(server_frame(b'{"method": "Inspector.targetCrashed", "params": {}, "sessionId": "S"}'))
    writes = transport.writes
    with pytest.raises(DevToolsError, match=r"^Page\.captureScreenshot: Target crashed$"):
        await session.send("Page.captureScreenshot")
    assert transport.writes == writes  # never sent to a renderer that cannot answer
    connection.data_received(
        server_frame(b'{"method": "Inspector.targetReloadedAfterCrash", "params": {}, "sessionId": "S"}')
    )
    sent = session.request("Page.enable")
    assert transport.writes == writes + 1
    sent.cancel()


async def test_an_unknown_session_reads_as_closed(wire: tuple[DevTools, FakeTransport]) -> None:
    connection, _ = wire
    pending = connection.request("Runtime.evaluate", {"expression": "1"}, "S")
    error = b'{"id": 1, "error": {"code": -32001, "message": "Session with given id not found."}}'
    connection.data_received(server_frame(error))
    with pytest.raises(DevToolsError, match="has been closed"):
        await pending


@pytest.mark.parametrize("message", [b"[]", b"not json", b'"a string"'])
async def test_a_bad_message_closes_the_connection(wire: tuple[DevTools, FakeTransport], message: bytes) -> None:
    connection, transport = wire
    connection.data_received(server_frame(message))
    assert transport.closed  # connection_lost follows: every session falls back to Playwright
