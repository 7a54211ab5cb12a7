"""The direct DevTools connection: sessions use it when the browser offers one, fall back to
Playwright's CDP sessions when not, and fail commands cleanly when a page or browser goes away.
The CDP layer (replies, events, deadlines, sessions, closing) is tested without a browser against a
fake DevTools endpoint; the WebSocket itself is aiohttp's."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from playwright.async_api import Browser, async_playwright
from playwright.async_api import Error as PlaywrightError

from webagent.agent import Agent
from webagent.browser import devtools, launcher
from webagent.browser.deadline import BoundedCDPSession, CommandTimeout
from webagent.browser.devsession import DevToolsError, DevToolsSession
from webagent.browser.devtools import DevTools, devtools_for, free_port
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


@pytest.mark.browser
async def test_the_target_id_is_asked_while_the_start_page_loads(
    browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The three Playwright round trips for a page's target id start with the session, not at its
    first screenshot (12 of that screenshot's 14 s at 500 sessions beside 4 hogs)."""
    order: list[str] = []
    target_info, goto = DevTools.target_info, BrowserSession.goto

    async def asked(self: DevTools, *args: Any) -> dict[str, Any]:
        order.append("target id asked")
        info: dict[str, Any] = await target_info(self, *args)
        order.append("target id known")
        return info

    async def going(self: BrowserSession, *args: Any, **kwargs: Any) -> None:
        await goto(self, *args, **kwargs)
        order.append("start page loaded")

    monkeypatch.setattr(DevTools, "target_info", asked)
    monkeypatch.setattr(BrowserSession, "goto", going)
    session = await BrowserSession.create(browser, BrowserConfig())
    try:
        await session.goto(COUNTER, start=True)
        await session.screenshot(frame_for(1280, 800, PROFILES["holo1.5"]))
        assert isinstance(session._state.cdp, DevToolsSession)  # attached with the id asked ahead
        assert order[0] == "target id asked"  # asked as the session opened, while the start page loaded
        assert order.count("target id asked") == 1  # and not again at the first screenshot
    finally:
        await session.close()


@pytest.mark.browser
async def test_a_target_id_asked_ahead_in_vain_is_asked_again_at_attach(
    browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its deadline may run out during a slow first load: the session then asks again rather than
    falling back to Playwright's CDP session for the rest of its life."""
    calls: list[int] = []
    target_info = DevTools.target_info

    async def flaky(self: DevTools, *args: Any) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise CommandTimeout("Target.getTargetInfo: no answer from the browser within 30 s")
        info: dict[str, Any] = await target_info(self, *args)
        return info

    monkeypatch.setattr(DevTools, "target_info", flaky)
    session = await BrowserSession.create(browser, BrowserConfig())
    try:
        await session.goto(COUNTER, start=True)
        await session.screenshot(frame_for(1280, 800, PROFILES["holo1.5"]))
        assert len(calls) == 2
        assert isinstance(session._state.cdp, DevToolsSession)  # on the direct connection all the same
    finally:
        await session.close()


@pytest.mark.browser
async def test_a_session_closed_before_its_first_screenshot_leaves_no_probe(browser: Browser) -> None:
    session = await BrowserSession.create(browser, BrowserConfig())
    probes = [t for t in asyncio.all_tasks() if "target_info" in repr(t.get_coro())]
    assert len(probes) == 1
    await session.close()
    assert probes[0].cancelled()  # stopped with the session (its page is closed: nothing to attach to)
    assert not [t for t in asyncio.all_tasks() if "target_info" in repr(t.get_coro()) and not t.done()]


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


# -- the CDP layer, against a fake DevTools endpoint ----------------------------------------------
class FakeBrowser:
    """A DevTools endpoint on 127.0.0.1 (aiohttp's server): ``/json/version`` and one WebSocket,
    whose commands it records; the test says what it sends back."""

    def __init__(self, *, hold: bool = False) -> None:
        self.hold = hold  # read nothing once connected (a browser that no longer answers, close included)
        self.commands: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.released = asyncio.Event()
        self.socket: web.WebSocketResponse | None = None
        self.request: web.Request | None = None
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/json/version", self._version)
        app.router.add_get("/devtools/browser/fake", self._socket)
        self.runner = web.AppRunner(app, shutdown_timeout=1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        self.released.set()
        assert self.runner is not None
        await self.runner.cleanup()

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"webSocketDebuggerUrl": f"ws://127.0.0.1:{self.port}/devtools/browser/fake"})

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        self.socket, self.request = ws, request
        if self.hold:
            await self.released.wait()
            return ws
        async for message in ws:
            self.commands.put_nowait(json.loads(message.data))
        return ws

    async def command(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.commands.get(), 5)

    async def send(self, message: dict[str, Any] | str) -> None:
        assert self.socket is not None
        await self.socket.send_str(message if isinstance(message, str) else json.dumps(message))


@pytest.fixture
async def fake() -> AsyncIterator[FakeBrowser]:
    server = FakeBrowser()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def connection(fake: FakeBrowser) -> AsyncIterator[DevTools]:
    connected = await DevTools.connect("127.0.0.1", fake.port)
    yield connected
    connected.close()
    await closed_fully(connected)


async def closed_fully(connection: DevTools) -> None:
    """Wait for the socket's closing (bounded by CLOSE_TIMEOUT_S, which close() does not wait for)."""
    assert connection._closer is not None
    await asyncio.wait_for(asyncio.shield(connection._closer), devtools.CLOSE_TIMEOUT_S + 2)


def with_session(connection: DevTools, session_id: str = "S") -> DevToolsSession:
    session = DevToolsSession(connection, session_id)
    connection.sessions[session_id] = session
    return session


async def test_replies_resolve_their_commands_in_any_order(connection: DevTools, fake: FakeBrowser) -> None:
    big = "x" * 70_000
    first = connection.request("Runtime.evaluate", {"expression": "1"}, "S1")
    second = connection.request("Runtime.evaluate", {"expression": big})
    assert [await fake.command(), await fake.command()] == [
        {"id": 1, "method": "Runtime.evaluate", "params": {"expression": "1"}, "sessionId": "S1"},
        {"id": 2, "method": "Runtime.evaluate", "params": {"expression": big}},
    ]
    await fake.send({"id": 2, "result": {"value": big}})
    await fake.send({"id": 1, "error": {"code": -32000, "message": "nope"}})
    assert (await second) == {"value": big}
    with pytest.raises(DevToolsError, match=r"^Runtime\.evaluate: nope$"):
        await first


async def test_large_messages_both_ways(connection: DevTools, fake: FakeBrowser) -> None:
    """Above aiohttp's default limit of 4 MiB: a full-page screenshot can be tens of MB."""
    sent = "a" * 12_000_000
    pending = connection.request("Runtime.evaluate", {"expression": sent}, "S")
    command = await fake.command()
    assert command["params"]["expression"] == sent
    shot = "b" * 24_000_000
    await fake.send({"id": command["id"], "result": {"data": shot}, "sessionId": "S"})
    assert (await asyncio.wait_for(pending, 10))["data"] == shot


async def test_events_reach_their_sessions_handlers_even_past_a_failing_one(
    connection: DevTools, fake: FakeBrowser
) -> None:
    session = with_session(connection)
    other = with_session(connection, "T")
    seen: list[Any] = []
    session.on("Page.windowOpen", lambda _: 1 / 0)  # a handler's bug stops neither the others nor the reader
    session.on("Page.windowOpen", seen.append)
    other.on("Page.windowOpen", lambda params: seen.append(("T", params)))
    pending = session.request("Page.enable")
    command = await fake.command()
    await fake.send({"method": "Page.windowOpen", "params": {"url": "u" * 300}, "sessionId": "S"})
    await fake.send({"method": "Page.frameNavigated", "params": {}, "sessionId": "S"})  # nobody listens
    await fake.send({"method": "Page.windowOpen", "params": {"url": "elsewhere"}, "sessionId": "U"})  # no such session
    await fake.send({"id": command["id"], "result": {}, "sessionId": "S"})
    assert await pending == {}
    assert seen == [{"url": "u" * 300}]


async def test_a_command_never_answered_fails_at_its_deadline(connection: DevTools, fake: FakeBrowser) -> None:
    session = with_session(connection)
    with pytest.raises(CommandTimeout, match=r"^Page\.captureScreenshot: no answer from the browser within 0\.2 s$"):
        await session.send("Page.captureScreenshot", timeout_s=0.2)
    assert not connection._pending
    late = await fake.command()
    await fake.send({"id": late["id"], "result": {"data": "late"}, "sessionId": "S"})  # ignored
    connection.timeout_s = 0.2  # the connection's own deadline, where the command names none
    with pytest.raises(CommandTimeout, match=r"within 0\.2 s"):
        await session.send("Runtime.evaluate", {"expression": "1"})
    assert not connection._pending and not connection.closed  # the connection goes on


@pytest.mark.parametrize("how", ["close frame", "dropped"])
async def test_a_socket_closed_mid_command_fails_every_pending_command(
    connection: DevTools, fake: FakeBrowser, how: str
) -> None:
    session = with_session(connection)
    pending = [session.request("Page.enable"), connection.request("Target.getTargets", None)]
    await fake.command()
    await fake.command()
    if how == "close frame":
        assert fake.socket is not None
        await fake.socket.close()
    else:
        assert fake.request is not None and fake.request.transport is not None
        fake.request.transport.abort()
    for future, method in zip(pending, ("Page.enable", "Target.getTargets"), strict=True):
        with pytest.raises(DevToolsError, match=rf"^{method}: .*has been closed"):
            await asyncio.wait_for(future, 5)
    assert connection.closed and session.closed and not connection.sessions
    with pytest.raises(DevToolsError, match="has been closed"):
        await session.send("Page.enable")
    with pytest.raises(DevToolsError, match="has been closed"):
        await connection.request("Page.enable", None)
    await closed_fully(connection)


async def test_close_fails_everything_at_once_and_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devtools, "CLOSE_TIMEOUT_S", 0.3)
    fake = FakeBrowser(hold=True)  # never answers the closing handshake
    await fake.start()
    try:
        connection = await DevTools.connect("127.0.0.1", fake.port)
        session = with_session(connection)
        pending = session.request("Page.enable")
        started = asyncio.get_running_loop().time()
        connection.close()
        assert connection.closed and session.closed and pending.done()
        with pytest.raises(DevToolsError, match=r"^Page\.enable: .*has been closed"):
            await pending
        await closed_fully(connection)
        assert asyncio.get_running_loop().time() - started < 2
    finally:
        await fake.stop()


async def test_a_click_sends_its_three_events_together_in_order(connection: DevTools, fake: FakeBrowser) -> None:
    session = with_session(connection)
    clicking = asyncio.ensure_future(session.click(10, 20))
    commands = [await fake.command() for _ in range(3)]  # all three before any reply
    assert [(c["params"]["type"], c["params"]["buttons"]) for c in commands] == [
        ("mouseMoved", 0),
        ("mousePressed", 1),
        ("mouseReleased", 0),
    ]
    assert all(c["params"]["x"] == 10 and c["params"]["y"] == 20 and c["sessionId"] == "S" for c in commands)
    for c in commands:
        await fake.send({"id": c["id"], "result": {}, "sessionId": "S"})
    await asyncio.wait_for(clicking, 5)

    alone = session.request("Page.captureScreenshot")  # nothing follows: it goes out anyway
    assert (await fake.command())["method"] == "Page.captureScreenshot"
    alone.cancel()


class Corks:
    """The connection's socket, its corking recorded."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.calls: list[int] = []

    def setsockopt(self, level: int, option: int, value: int) -> None:
        self.calls.append(value)
        self.sock.setsockopt(level, option, value)


async def test_the_commands_of_a_turn_go_out_corked_a_lone_one_not(connection: DevTools, fake: FakeBrowser) -> None:
    """Several frames of one loop turn leave in one segment (one wake-up of the browser)."""
    assert connection._socket is not None  # a TCP socket, where TCP_CORK exists (Linux)
    corks = Corks(connection._socket)
    connection._socket = corks
    session = with_session(connection)
    clicking = asyncio.ensure_future(session.click(10, 20))
    commands = [await fake.command() for _ in range(3)]
    assert corks.calls == [1, 0]  # corked for the three, let go after them
    for c in commands:
        await fake.send({"id": c["id"], "result": {}, "sessionId": "S"})
    await asyncio.wait_for(clicking, 5)
    alone = session.request("Page.captureScreenshot")
    assert (await fake.command())["method"] == "Page.captureScreenshot"
    assert corks.calls == [1, 0]  # one frame: nothing to hold
    alone.cancel()


async def test_a_click_on_a_closing_page_fails_once(connection: DevTools, fake: FakeBrowser) -> None:
    session = with_session(connection)
    clicking = asyncio.ensure_future(session.click(10, 20))
    for _ in range(3):
        await fake.command()
    await fake.send({"method": "Target.detachedFromTarget", "params": {"sessionId": "S"}})
    with pytest.raises(DevToolsError, match=r"^Input\.dispatchMouseEvent: .*has been closed"):
        await asyncio.wait_for(clicking, 5)
    assert session.closed and session.gone and not connection._pending and not connection.closed


async def test_a_crash_fails_the_sessions_pending_commands(connection: DevTools, fake: FakeBrowser) -> None:
    session = with_session(connection)
    mine = session.request("Runtime.evaluate", {"expression": "1"})
    theirs = connection.request("Runtime.evaluate", {"expression": "1"}, "T")
    await fake.send({"method": "Inspector.targetCrashed", "params": {}, "sessionId": "S"})
    with pytest.raises(DevToolsError, match="Target crashed"):
        await asyncio.wait_for(mine, 5)
    assert not theirs.done()
    theirs.cancel()


async def test_a_crashed_target_fails_new_commands_at_once(connection: DevTools, fake: FakeBrowser) -> None:
    session = with_session(connection)
    crashed = asyncio.Event()
    session.on("Inspector.targetCrashed", lambda _: crashed.set())
    await fake.send({"method": "Inspector.targetCrashed", "params": {}, "sessionId": "S"})
    await asyncio.wait_for(crashed.wait(), 5)
    with pytest.raises(DevToolsError, match=r"^Page\.captureScreenshot: Target crashed$"):
        await session.send("Page.captureScreenshot")
    reloaded = asyncio.Event()
    session.on("Inspector.targetReloadedAfterCrash", lambda _: reloaded.set())
    await fake.send({"method": "Inspector.targetReloadedAfterCrash", "params": {}, "sessionId": "S"})
    await asyncio.wait_for(reloaded.wait(), 5)
    sent = session.request("Page.enable")
    assert (await fake.command())["method"] == "Page.enable"  # the capture was never sent: this is the first
    sent.cancel()


async def test_an_unknown_session_reads_as_closed(connection: DevTools, fake: FakeBrowser) -> None:
    pending = connection.request("Runtime.evaluate", {"expression": "1"}, "S")
    command = await fake.command()
    await fake.send({"id": command["id"], "error": {"code": -32001, "message": "Session with given id not found."}})
    with pytest.raises(DevToolsError, match="has been closed"):
        await asyncio.wait_for(pending, 5)


@pytest.mark.parametrize("message", ["[]", "not json", '"a string"'])
async def test_a_bad_message_closes_the_connection(connection: DevTools, fake: FakeBrowser, message: str) -> None:
    pending = connection.request("Page.enable", None)
    await fake.command()
    await fake.send(message)
    with pytest.raises(DevToolsError, match="has been closed"):  # every session falls back to Playwright
        await asyncio.wait_for(pending, 5)
    assert connection.closed


@pytest.mark.parametrize(
    ("routes", "error"), [([], aiohttp.ClientResponseError), (["/json/version"], aiohttp.WSServerHandshakeError)]
)
async def test_an_http_server_that_is_not_devtools_is_refused(
    fake: FakeBrowser, routes: list[str], error: type[Exception]
) -> None:
    app = web.Application()  # no /json/version, or one that names a socket this server does not have
    for route in routes:
        app.router.add_get(route, fake._version)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        with pytest.raises(error):
            await DevTools.connect("127.0.0.1", site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    finally:
        await runner.cleanup()
