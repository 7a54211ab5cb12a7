"""BrowserSession against a real Chromium: screenshots, input, tabs, dialogs, navigation, settling.

Pages come from a tiny local HTTP server (127.0.0.1, port 0) so that navigation has real URLs;
elements sit at fixed CSS positions so that the tests can click by coordinates like the agent.
"""

from __future__ import annotations

import base64
import io
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from PIL import Image
from playwright.async_api import Browser

from webagent.browser.devtools import free_port
from webagent.browser.session import BrowserSession
from webagent.config import PROFILES, BrowserConfig
from webagent.errors import ActionError, NavigationError
from webagent.guard.secrets import Secrets
from webagent.images import ResizeRule, frame_for

pytestmark = pytest.mark.browser

# -- pages ----------------------------------------------------------------------------------------

_STYLE = (
    "<style>body{margin:0;font:16px sans-serif;background:#fff}.at{position:absolute;box-sizing:border-box}</style>"
)


def _page(body: str, title: str = "test", head: str = "") -> str:
    return f"<!doctype html><html><head><title>{title}</title>{_STYLE}{head}</head><body>{body}</body></html>"


# A red square at document (600, 1100)-(700, 1200) on a 3000 px tall page.
SQUARE = _page(
    '<div style="height:3000px"></div>'
    '<div class="at" style="left:600px;top:1100px;width:100px;height:100px;background:#ff0000"></div>'
)

# A button that counts clicks at (100..300, 100..160); a link to /b at (100..300, 300..340).
CLICKS = _page(
    '<button id="btn" class="at" style="left:100px;top:100px;width:200px;height:60px" '
    "onclick=\"this.dataset.n = (+this.dataset.n || 0) + 1; document.getElementById('n').textContent = this.dataset.n\">"
    "Count</button>"
    '<div id="n" class="at" style="left:400px;top:100px">0</div>'
    '<a id="link" class="at" style="left:100px;top:300px;width:200px;height:40px;display:block" href="/b">to B</a>'
)

# Page B has an image that takes 400 ms, so its load event comes well after the navigation commits.
PAGE_B = _page('<h1 id="b">Page B</h1><img src="/slow?ms=400" width="10" height="10">', title="B")

# A text input with a value (20..420, 20..60) inside a GET form to /b.
FORM = _page(
    '<form action="/b" method="get">'
    '<input id="q" name="q" class="at" style="left:20px;top:20px;width:400px;height:40px" value="old text">'
    "</form>"
)

# A labelled <select> and a plain div. The select counts its change events.
SELECT = _page(
    '<label for="color" class="at" style="left:20px;top:20px;width:120px;height:30px">Colour</label>'
    '<select id="color" class="at" style="left:200px;top:20px;width:200px;height:30px">'
    '<option value="r">Red</option><option value="g">Green</option><option value="b">Dark Blue</option>'
    "</select>"
    '<div id="plain" class="at" style="left:20px;top:200px;width:200px;height:40px">not a select</div>'
    "<script>window.changes = 0; document.getElementById('color')"
    ".addEventListener('change', () => window.changes++)</script>"
)

LONG = _page('<div style="height:6000px;background:linear-gradient(#fff,#ccc)"></div>')

FOCUS = _page(
    '<input id="first" class="at" style="left:20px;top:20px;width:200px;height:30px" value="hello">'
    '<input id="second" class="at" style="left:20px;top:80px;width:200px;height:30px">'
)

# A link that opens /tab in a new tab (100..300, 100..140).
# And a button (100..300, 300..360) that raises an alert.
OPENER = _page(
    '<a id="open" class="at" style="left:100px;top:100px;width:200px;height:40px;display:block" '
    'href="/tab" target="_blank">open tab</a>'
    '<button class="at" style="left:100px;top:300px;width:200px;height:60px" '
    "onclick=\"alert('back on the opener')\">alert</button>",
    title="opener",
)
# A link (100..300, 100..140) to a new tab whose server takes 0.6 s to answer.
SLOW_OPENER = _page(
    '<a class="at" style="left:100px;top:100px;width:200px;height:40px;display:block" '
    'href="/slow-tab" target="_blank">open slow tab</a>',
    title="slow opener",
)
# The new tab, blue: a button (100..300, 100..160) that closes the tab.
TAB = _page(
    '<button class="at" style="left:100px;top:100px;width:200px;height:60px" onclick="window.close()">close</button>',
    title="tab",
    head="<style>body{background:#0000ff}</style>",
)

# Three buttons, each raising one kind of dialog, at y = 100, 200, 300 (x 100..300, 60 px tall).
DIALOGS = _page(
    '<button class="at" style="left:100px;top:100px;width:200px;height:60px" '
    "onclick=\"alert('Hello   from\\nalert')\">alert</button>"
    '<button class="at" style="left:100px;top:200px;width:200px;height:60px" '
    "onclick=\"document.getElementById('c').textContent = String(confirm('Are you sure?'))\">confirm</button>"
    '<button class="at" style="left:100px;top:300px;width:200px;height:60px" '
    "onclick=\"document.getElementById('p').textContent = String(prompt('Your name?', 'Ada'))\">prompt</button>"
    '<div id="c" class="at" style="left:400px;top:200px">unset</div>'
    '<div id="p" class="at" style="left:400px;top:300px">unset</div>'
)

# A button (100..300, 100..160) whose alert ends in a secret, cut by the dialog's 300-character report.
SECRET_DIALOG = _page(
    '<button class="at" style="left:100px;top:100px;width:200px;height:60px" '
    "onclick=\"alert('x'.repeat(295) + 'hunter2-Correct-Horse')\">alert</button>"
)

# Counts its loads in sessionStorage.
RELOAD = _page(
    '<div id="n">?</div><script>sessionStorage.n = (+sessionStorage.n || 0) + 1;'
    "document.getElementById('n').textContent = sessionStorage.n</script>"
)

# Links (100..300, 100..140) to endpoints that never finish within the settle cap.
STALL_BODY_LINK = _page(
    '<a class="at" style="left:100px;top:100px;width:200px;height:40px;display:block" href="/stall-body">slow</a>'
)
STALL_HEADERS_LINK = _page(
    '<a class="at" style="left:100px;top:100px;width:200px;height:40px;display:block" href="/stall-headers">slow</a>'
)

# Its load event comes 3 s after it commits (a slow image).
SLOW_LOAD = _page('<h1>slow</h1><img src="/slow?ms=3000" width="10" height="10">', title="slow")

# A button (100..300, 100..140) whose script goes back in history: neither a renderer-requested
# navigation (no frameRequestedNavigation) nor one the session started.
BACK_BUTTON = _page(
    '<button class="at" style="left:100px;top:100px;width:200px;height:40px" onclick="history.back()">back</button>',
    title="back button",
)
# Going back to it loads it again, 400 ms: its image URL is new on every load, and the unload
# handler keeps it out of the back/forward cache where a browser has one enabled.
NO_BFCACHE_B = _page(
    "<h1>B again</h1><script>addEventListener('unload', () => {});"
    "document.write('<img width=10 height=10 src=\"/slow?ms=400&r=' + Math.random() + '\">')</script>",
    title="B again",
)

# A title set by script to hold a lone surrogate (a JavaScript string is UTF-16; UTF-8 has no such character).
LONE_SURROGATE = _page(
    "<p id='p'></p><script>document.title = 'a\\uD800b'; document.getElementById('p').textContent = 'c\\uDFFFd'</script>",
    title="x",
)

PAGES = {
    "/lone-surrogate": LONE_SURROGATE,
    "/back-button": BACK_BUTTON,
    "/no-bfcache-b": NO_BFCACHE_B,
    "/slow-load": SLOW_LOAD,
    "/square": SQUARE,
    "/clicks": CLICKS,
    "/b": PAGE_B,
    "/form": FORM,
    "/select": SELECT,
    "/long": LONG,
    "/focus": FOCUS,
    "/opener": OPENER,
    "/slow-opener": SLOW_OPENER,
    "/tab": TAB,
    "/dialogs": DIALOGS,
    "/secret-dialog": SECRET_DIALOG,
    "/reload": RELOAD,
    "/stall-body-link": STALL_BODY_LINK,
    "/stall-headers-link": STALL_HEADERS_LINK,
}

_PNG_1PX = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
STALL_S = 5.0  # the stalled endpoints give up after this long (or at server shutdown)


# -- local server ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageServer:
    url: str

    def __call__(self, path: str) -> str:
        return self.url + path


def _handler(stop: threading.Event) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, body: bytes, ctype: str = "text/html; charset=utf-8") -> None:
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            try:
                if parts.path == "/slow":
                    ms = int(parse_qs(parts.query).get("ms", ["0"])[0])
                    stop.wait(ms / 1000)
                    self._send(_PNG_1PX, "image/png")
                elif parts.path == "/slow-tab":
                    stop.wait(0.6)
                    self._send(TAB.encode())
                elif parts.path == "/stall-headers":
                    # Nothing at all until STALL_S has passed: the navigation does not even commit.
                    stop.wait(STALL_S)
                    self._send(_page("late").encode())
                elif parts.path == "/stall-body":
                    # Headers and half a page, then a stall: committed, but no load event.
                    body = _page("<p>first half</p>" + " " * 2048 + "<p>second half</p>").encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    half = body.index(b"<p>second half")
                    self.wfile.write(body[:half])
                    self.wfile.flush()
                    stop.wait(STALL_S)
                    self.wfile.write(body[half:])
                elif parts.path in PAGES:
                    self._send(PAGES[parts.path].encode())
                else:
                    self.send_error(404)
            except OSError:
                pass  # the browser went away mid-response

    return Handler


@pytest.fixture(scope="module")
def pages() -> Iterator[PageServer]:
    stop = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stop))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield PageServer(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        stop.set()  # releases stalled handlers at once
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


SessionFactory = Callable[..., Awaitable[BrowserSession]]


@pytest.fixture
async def make_session(browser: Browser) -> AsyncIterator[SessionFactory]:
    """``await make_session(**browser_config)`` — a fresh session, closed after the test."""
    sessions: list[BrowserSession] = []

    async def factory(**config: Any) -> BrowserSession:
        session = await BrowserSession.create(browser, BrowserConfig(**config))
        sessions.append(session)
        return session

    yield factory
    for session in sessions:
        await session.close()


@pytest.fixture
async def session(make_session: SessionFactory) -> BrowserSession:
    return await make_session()


async def js(session: BrowserSession, expression: str) -> Any:
    return await session.page.evaluate(expression)


async def scroll_to(session: BrowserSession, y: int) -> None:
    """Scroll by script and let a frame be drawn, as the session's settle does after an action."""
    await js(session, f"window.scrollTo(0, {y})")
    await js(session, "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert await js(session, "window.scrollY") == y


# -- screenshots ----------------------------------------------------------------------------------

RULES: list[tuple[str, ResizeRule | None]] = [("native", None), *PROFILES.items()]
RED = (255, 0, 0)
WHITE = (255, 255, 255)
BLUE = (0, 0, 255)


def _decode(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _assert_colour(
    image: Image.Image, x: float, y: float, expected: tuple[int, int, int], tol: int, where: str = ""
) -> None:
    pixel = image.convert("RGB").getpixel((int(x), int(y)))
    assert isinstance(pixel, tuple)
    assert all(abs(a - b) <= tol for a, b in zip(pixel, expected, strict=True)), (
        f"{where}: pixel at ({int(x)}, {int(y)}) is {pixel}, expected about {expected}"
    )


@pytest.mark.parametrize(("fmt", "pil_format", "tol"), [("jpeg", "JPEG", 30), ("png", "PNG", 2)])
async def test_screenshot_is_the_visible_viewport_at_the_frame_size(
    make_session: SessionFactory, pages: PageServer, fmt: str, pil_format: str, tol: int
) -> None:
    session = await make_session() if fmt == "jpeg" else await make_session(screenshot_format=fmt)
    assert session.config.screenshot_format == fmt
    await session.goto(pages("/square"))
    await scroll_to(session, 1000)

    for name, rule in RULES:  # one page, a screenshot per profile (and the native frame)
        frame = frame_for(1280, 800, rule)
        shot = await session.screenshot(frame)

        assert shot.frame == frame, name
        assert shot.mime == f"image/{fmt}", name
        image = _decode(shot.data())
        assert image.format == pil_format, name
        assert image.size == (frame.image_width, frame.image_height), name
        # The square is at viewport CSS (600..700, 100..200) after the scroll.
        _assert_colour(image, *frame.to_image(650, 150), RED, tol, name)
        _assert_colour(image, *frame.to_image(610, 110), RED, tol, name)
        _assert_colour(image, *frame.to_image(690, 190), RED, tol, name)
        # Just outside it, and where it would be without the scroll (document position), is white.
        _assert_colour(image, *frame.to_image(650, 230), WHITE, tol, name)
        _assert_colour(image, *frame.to_image(560, 150), WHITE, tol, name)
        _assert_colour(image, *frame.to_image(650, 60), WHITE, tol, name)


def test_the_frames_cover_the_scaled_and_the_native_path() -> None:
    # Guards the test above: the scaled (clipped) and the identity (unclipped) paths are both exercised.
    frames = {name: frame_for(1280, 800, rule) for name, rule in RULES}
    assert frames["native"].is_identity
    assert (frames["holo1"].image_width, frames["holo1"].image_height) == (1260, 784)
    assert not frames["holo1"].is_identity


async def test_screenshot_of_a_non_default_viewport_for_holo1(make_session: SessionFactory, pages: PageServer) -> None:
    session = await make_session(viewport="1366x768")
    assert session.viewport == (1366, 768)
    await session.goto(pages("/square"))
    await scroll_to(session, 1000)
    frame = frame_for(1366, 768, PROFILES["holo1"])
    assert not frame.is_identity
    assert (frame.image_width, frame.image_height) == (1316, 728)

    shot = await session.screenshot(frame)

    assert shot.mime == "image/jpeg"
    image = _decode(shot.data())
    assert image.format == "JPEG"
    assert image.size == (1316, 728)
    _assert_colour(image, *frame.to_image(650, 150), RED, 30)
    _assert_colour(image, *frame.to_image(650, 230), WHITE, 30)
    _assert_colour(image, *frame.to_image(650, 60), WHITE, 30)


async def test_screenshot_follows_a_later_scroll(session: BrowserSession, pages: PageServer) -> None:
    # The clip must use the current scroll position on every call, not the first one.
    await session.goto(pages("/square"))
    frame = frame_for(1280, 800, PROFILES["holo1"])
    first = _decode((await session.screenshot(frame)).data())
    _assert_colour(first, *frame.to_image(650, 150), WHITE, 30)
    await scroll_to(session, 1000)
    second = _decode((await session.screenshot(frame)).data())
    _assert_colour(second, *frame.to_image(650, 150), RED, 30)


async def test_screenshot_right_after_a_session_scroll(session: BrowserSession, pages: PageServer) -> None:
    # The agent's sequence: an action (which settles), then a screenshot of where the page is now.
    await session.goto(pages("/square"))
    await session.scroll("down")
    top = 1100 - await js(session, "window.scrollY")  # the square's viewport y
    assert 300 < top < 700
    for rule in (PROFILES["holo1"], None):
        frame = frame_for(1280, 800, rule)
        image = _decode((await session.screenshot(frame)).data())
        _assert_colour(image, *frame.to_image(650, top + 50), RED, 30, str(rule))
        _assert_colour(image, *frame.to_image(650, top - 40), WHITE, 30, str(rule))
        _assert_colour(image, *frame.to_image(650, top + 140), WHITE, 30, str(rule))


# -- click ----------------------------------------------------------------------------------------


async def test_click_hits_the_element_at_css_coordinates(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/clicks"))
    await session.click(200, 130)
    assert await js(session, "document.getElementById('n').textContent") == "1"
    await session.click(110, 105)
    assert await js(session, "document.getElementById('n').textContent") == "2"
    await session.click(350, 130)  # beside the button
    assert await js(session, "document.getElementById('n').textContent") == "2"
    assert session.url == pages("/clicks")
    assert session.drain_events() == []


async def test_click_on_a_link_returns_with_the_new_page_loaded(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/clicks"))
    await session.click(200, 320)
    assert session.url == pages("/b")
    assert await js(session, "document.readyState") == "complete"
    assert await js(session, "document.images[0].complete && document.images[0].naturalWidth") == 1
    assert await session.title() == "B"
    assert session.drain_events() == []


async def test_a_click_that_loads_a_page_reads_its_view_once(
    session: BrowserSession, pages: PageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scroll offsets of the next screenshot are read once the new page has loaded, and not also
    before: the page already answered the click by asking to navigate (one round trip per step less).
    Whether the page's request comes before the click's reply (and whether a capture is retaken
    after the new document commits) depends on the machine's load, so the click is tried a few
    times: one try must read the view once for its one capture (without the change: always twice)."""
    from webagent.browser.devtools import DevTools

    frame = frame_for(1280, 800, PROFILES["holo1"])
    sent: list[str] = []
    request = DevTools.request

    def counted(self: DevTools, method: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(method)
        return request(self, method, *args, **kwargs)

    monkeypatch.setattr(DevTools, "request", counted)
    tries: list[tuple[int, int]] = []
    for _ in range(8):
        await session.goto(pages("/clicks"))
        await session.screenshot(frame)
        sent.clear()
        await session.click(200, 320)
        shot = await session.screenshot(frame)
        assert session.url == pages("/b")
        assert shot.frame == frame
        tries.append((sent.count("Runtime.evaluate"), sent.count("Page.captureScreenshot")))
        if tries[-1] == (1, 1):
            break
    assert tries[-1] == (1, 1), tries  # (view reads, captures) per try
    assert await session.title() == "B"


# -- write ----------------------------------------------------------------------------------------


async def test_write_replaces_the_existing_text(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/form"))
    assert await js(session, "document.getElementById('q').value") == "old text"
    await session.write(200, 40, "new words", press_enter=False)
    assert await js(session, "document.getElementById('q').value") == "new words"
    assert session.url == pages("/form")


async def test_write_with_enter_submits_the_form(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/form"))
    await session.write(200, 40, "hello world", press_enter=True)
    assert session.url == pages("/b?q=hello+world")
    assert await js(session, "document.readyState") == "complete"


async def test_write_types_a_long_text_fully(session: BrowserSession, pages: PageServer) -> None:
    text = "The quick brown fox jumps over the lazy dog; " * 4 + "END"
    assert len(text) > 64
    await session.goto(pages("/form"))
    await session.write(200, 40, text, press_enter=False)
    assert await js(session, "document.getElementById('q').value") == text


async def test_write_of_an_empty_text_clears_the_field(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/form"))
    await session.write(200, 40, "", press_enter=False)
    assert await js(session, "document.getElementById('q').value") == ""


# -- select_option --------------------------------------------------------------------------------


SELECT_CASES = [
    ("label", (300, 35), "Green", "Green", "g"),
    ("value", (300, 35), "b", "Dark Blue", "b"),
    ("case-insensitive label", (300, 35), "dark BLUE", "Dark Blue", "b"),
    ("whitespace-insensitive label", (300, 35), "  dark   blue ", "Dark Blue", "b"),
    ("through its <label>", (60, 35), "Green", "Green", "g"),
]


async def test_select_option_chooses_and_fires_change(session: BrowserSession, pages: PageServer) -> None:
    for case, point, option, label, value in SELECT_CASES:
        await session.goto(pages("/select"))  # a fresh page: value "r", no change events yet
        assert await js(session, "document.getElementById('color').value") == "r"
        chosen = await session.select_option(*point, option)
        assert chosen == label, case
        assert await js(session, "document.getElementById('color').value") == value, case
        assert await js(session, "window.changes") == 1, case


async def test_select_option_without_a_match_lists_the_options(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/select"))
    with pytest.raises(ActionError) as err:
        await session.select_option(300, 35, "Purple")
    message = str(err.value)
    assert "Purple" in message
    assert '"Red", "Green", "Dark Blue"' in message
    assert await js(session, "document.getElementById('color').value") == "r"
    assert await js(session, "window.changes") == 0


async def test_select_option_off_a_select_says_not_a_dropdown(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/select"))
    with pytest.raises(ActionError, match="not a dropdown") as err:
        await session.select_option(100, 220, "Green")
    assert "<div>" in str(err.value)
    assert await js(session, "window.changes") == 0


# -- scroll and keys ------------------------------------------------------------------------------


async def test_scroll_moves_by_most_of_a_viewport(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/long"))
    height = session.viewport[1]
    assert height == 800
    step = 0.8 * height

    await session.scroll("down")
    first = await js(session, "window.scrollY")
    assert step * 0.95 <= first <= step * 1.05

    await session.scroll("down")
    second = await js(session, "window.scrollY")
    assert step * 0.95 <= second - first <= step * 1.05

    await session.scroll("up")
    third = await js(session, "window.scrollY")
    assert step * 0.95 <= second - third <= step * 1.05


async def test_press_tab_moves_focus(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/focus"))
    await js(session, "document.getElementById('first').focus()")
    await session.press("Tab")
    assert await js(session, "document.activeElement.id") == "second"


async def test_press_ctrl_a_selects_all(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/focus"))
    await js(session, "(() => { const e = document.getElementById('first'); e.focus(); e.setSelectionRange(5, 5); })()")
    await session.press("ctrl+a")
    assert await js(session, "[document.activeElement.selectionStart, document.activeElement.selectionEnd]") == [0, 5]
    await session.press("Backspace")
    assert await js(session, "document.getElementById('first').value") == ""


# -- tabs -----------------------------------------------------------------------------------------


async def test_new_tab_is_followed_and_its_close_switches_back(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/opener"))
    opener = session.page

    await session.click(200, 120)

    assert session.page is not opener
    assert session.url == pages("/tab")
    assert await js(session, "document.readyState") == "complete"
    events = session.drain_events()
    assert len(events) == 1
    assert "new tab" in events[0]
    assert pages("/tab") in events[0]
    # Screenshots now come from the new (blue) tab, not the opener.
    for rule in (None, PROFILES["holo1"]):
        frame = frame_for(1280, 800, rule)
        shot = _decode((await session.screenshot(frame)).data())
        _assert_colour(shot, *frame.to_image(640, 500), BLUE, 30)

    await session.click(200, 130)  # window.close()

    assert session.page is opener
    assert not opener.is_closed()
    assert session.url == pages("/opener")
    events = session.drain_events()
    assert len(events) == 1
    assert "closed" in events[0]
    assert pages("/opener") in events[0]
    # The session works on the remaining tab: screenshots show it, its dialogs are reported once.
    for rule in (None, PROFILES["holo1"]):
        frame = frame_for(1280, 800, rule)
        shot = _decode((await session.screenshot(frame)).data())
        _assert_colour(shot, *frame.to_image(640, 500), WHITE, 30)
    await session.click(200, 330)
    assert session.drain_events() == ["A JavaScript alert dialog said: 'back on the opener' (it was accepted)."]


async def test_a_tab_driven_anew_is_clipped_at_its_own_scroll_offsets(
    session: BrowserSession, pages: PageServer
) -> None:
    await session.goto(pages("/opener"))
    opener = session.page
    # The opener scrolled 1000 px down onto a red band; its view (offsets, title) is read.
    await js(
        session,
        "(() => { document.body.insertAdjacentHTML('beforeend', '<div style=\"position:absolute;left:0;"
        'top:1000px;width:1280px;height:800px;background:#ff0000"></div><div style="height:3000px"></div>\');'
        " window.scrollTo(0, 1000); })()",
    )
    frame = frame_for(1280, 800, PROFILES["holo1"])
    _assert_colour(_decode((await session.screenshot(frame)).data()), *frame.to_image(640, 500), RED, 30)
    for page, colour in ((await session.context.new_page(), BLUE), (opener, RED)):
        if page is not opener:
            await page.goto(pages("/tab"))  # blue, not scrolled
        # The view of the tab it leaves was read (as settle reads it after an action, before the
        # action's new or closed tab is followed): the next tab's screenshot must not use it.
        await session._capture.read_settled_view(after_frame=False, timeout_s=2.0)
        await session.drive(page)  # another tab, then the opener again: each is read afresh
        shot = _decode((await session.screenshot(frame)).data())
        _assert_colour(shot, *frame.to_image(640, 500), colour, 30)


async def test_new_tab_with_a_slow_server_is_followed(session: BrowserSession, pages: PageServer) -> None:
    # The new tab's server answers after 0.6 s, well within settle_timeout_s (3 s): the click
    # opened a tab, so the session must switch to it rather than stay on the opener.
    await session.goto(pages("/slow-opener"))
    opener = session.page

    await session.click(200, 120)

    assert session.page is not opener
    assert session.url == pages("/slow-tab")
    events = session.drain_events()
    assert len(events) == 1
    assert "new tab" in events[0]


# -- dialogs --------------------------------------------------------------------------------------


async def test_dialogs_are_accepted_and_reported(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/dialogs"))

    # Each dialog is reported by the time its click has settled: the action's own observation has it.
    events = []
    for y in (130, 230, 330):
        await session.click(200, y)
        events.append(session.drain_events())

    assert await js(session, "document.getElementById('c').textContent") == "true"
    assert await js(session, "document.getElementById('p').textContent") == "Ada"
    assert events == [
        ["A JavaScript alert dialog said: 'Hello from alert' (it was accepted)."],
        ["A JavaScript confirm dialog said: 'Are you sure?' (it was accepted)."],
        ["A JavaScript prompt dialog said: 'Your name?' (it was accepted)."],
    ]
    assert session.drain_events() == []


async def test_a_dialog_report_is_redacted_before_it_is_cut(session: BrowserSession, pages: PageServer) -> None:
    secrets = Secrets({"PW": "hunter2-Correct-Horse"})  # live: the browser's texts are redacted with it
    await session.goto(pages("/secret-dialog"))
    await session.click(200, 130)
    events = session.drain_events()
    assert len(events) == 1 and "{{PW" in events[0], events
    assert "hunter" not in events[0] and secrets.names == ["PW"]


# -- history, reload, goto ------------------------------------------------------------------------


async def test_go_back_on_the_start_page_raises_and_stays(session: BrowserSession, pages: PageServer) -> None:
    # The start page is the first page of the run: the tab's initial about:blank entry before it
    # is not a page to go back to, and the failed action must leave the page as it was.
    await session.goto(pages("/clicks"), start=True)
    with pytest.raises(ActionError, match="no previous page"):
        await session.go_back()
    assert session.url == pages("/clicks")


async def test_go_back_on_a_fresh_page_raises(session: BrowserSession) -> None:
    with pytest.raises(ActionError, match="no previous page"):
        await session.go_back()


async def test_go_back_returns_to_the_previous_page(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/clicks"))
    await session.click(200, 320)  # link to /b
    assert session.url == pages("/b")
    await session.go_back()
    assert session.url == pages("/clicks")
    assert await js(session, "document.readyState") == "complete"
    assert await js(session, "!!document.getElementById('btn')") is True


async def test_a_title_with_a_lone_surrogate_comes_as_utf_8_can_carry_it(
    session: BrowserSession, pages: PageServer
) -> None:
    await session.goto(pages("/lone-surrogate"))
    assert await js(session, "document.title.charCodeAt(1)") == 0xD800  # the page's own title
    title = await session.title()
    assert title == "a\ufffdb"
    title.encode("utf-8")
    text = await session.page_text()  # what a replay fingerprint hashes
    assert "c\ufffdd" in text
    text.encode("utf-8")


async def test_a_history_navigation_the_page_starts_is_waited_for(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/no-bfcache-b"))
    await session.goto(pages("/back-button"))
    await session.click(200, 120)  # history.back() in the page's own script
    assert session.url == pages("/no-bfcache-b")
    assert await js(session, "document.readyState") == "complete"  # settle waited for its load
    assert await session.title() == "B again"
    assert session.drain_events() == []


async def test_go_back_after_goto(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/clicks"))
    await session.goto(pages("/b"))
    await session.go_back()
    assert session.url == pages("/clicks")


async def test_refresh_reloads_the_page(session: BrowserSession, pages: PageServer) -> None:
    await session.goto(pages("/reload"))
    assert await js(session, "document.getElementById('n').textContent") == "1"
    await js(session, "window.marker = 42")
    await session.refresh()
    assert await js(session, "document.getElementById('n').textContent") == "2"
    assert await js(session, "window.marker === undefined") is True
    assert session.url == pages("/reload")


async def test_goto_at_start_to_an_unreachable_port_is_a_navigation_error(session: BrowserSession) -> None:
    url = f"http://127.0.0.1:{free_port()}/nothing"
    with pytest.raises(NavigationError) as err:
        await session.goto(url, start=True)
    assert url in str(err.value)
    assert "ERR_CONNECTION_REFUSED" in str(err.value)


async def test_goto_later_to_an_unreachable_port_is_an_action_error(session: BrowserSession) -> None:
    url = f"http://127.0.0.1:{free_port()}/nothing"
    with pytest.raises(ActionError) as err:
        await session.goto(url)
    assert url in str(err.value)
    assert "ERR_CONNECTION_REFUSED" in str(err.value)


# -- settling -------------------------------------------------------------------------------------


@pytest.mark.parametrize("link", ["/stall-body-link", "/stall-headers-link"])
async def test_settle_is_capped_on_a_page_that_never_loads(
    make_session: SessionFactory, pages: PageServer, link: str
) -> None:
    session = await make_session(settle_timeout_s=0.5)
    await session.goto(pages(link))
    started = time.monotonic()
    await session.click(200, 120)
    elapsed = time.monotonic() - started
    assert elapsed < 10.0  # the page never loads: only the cap ends the wait (a wide margin for loaded CI)
    events = session.drain_events()
    assert any("still loading" in e for e in events), events


async def test_goto_of_a_slow_page_reports_still_loading(make_session: SessionFactory, pages: PageServer) -> None:
    session = await make_session(navigation_timeout_s=0.3)
    started = time.monotonic()
    await session.goto(pages("/slow-load"), start=True)
    assert time.monotonic() - started < 2.0
    assert session.url == pages("/slow-load")
    assert session.drain_events() == ["The page was still loading after 0.3 s."]


async def test_go_back_to_a_slow_page_is_capped_not_an_error(make_session: SessionFactory, pages: PageServer) -> None:
    # Going back worked; the previous page is just slow to finish loading. Like click, go_back
    # should wait at most settle_timeout_s and report that the page is still loading: an
    # ActionError would tell the policy that it is still on the later page.
    session = await make_session(settle_timeout_s=0.3, navigation_timeout_s=0.3)
    await session.goto(pages("/slow-load"))
    await session.goto(pages("/clicks"))
    session.drain_events()
    started = time.monotonic()
    await session.go_back()
    assert time.monotonic() - started < 2.0
    assert session.url == pages("/slow-load")
    assert any("still loading" in e for e in session.drain_events())


async def test_refresh_of_a_slow_page_is_capped_not_an_error(make_session: SessionFactory, pages: PageServer) -> None:
    session = await make_session(settle_timeout_s=0.3, navigation_timeout_s=0.3)
    await session.goto(pages("/slow-load"))
    session.drain_events()
    await js(session, "window.marker = 42")
    started = time.monotonic()
    await session.refresh()
    assert time.monotonic() - started < 2.0
    assert await js(session, "window.marker === undefined") is True
    assert any("still loading" in e for e in session.drain_events())


# -- wrapping a user's page -----------------------------------------------------------------------


async def test_wrapping_a_users_page_leaves_the_context_open(browser: Browser, pages: PageServer) -> None:
    context = await browser.new_context()
    try:
        page = await context.new_page()
        session = BrowserSession(page, BrowserConfig())
        assert session.viewport == (1280, 720)  # the page's own viewport, not the config's 1280x800
        await session.goto(pages("/clicks"))
        await session.click(200, 130)
        await session.close()
        assert not page.is_closed()
        assert context in browser.contexts
        assert context.pages == [page]
        assert await page.evaluate("document.getElementById('n').textContent") == "1"
        await page.goto(pages("/b"))
        assert page.url == pages("/b")
    finally:
        await context.close()


async def test_a_users_tab_the_session_moved_off_is_let_go_too(browser: Browser, pages: PageServer) -> None:
    # The session follows a new tab; once closed, the user's first tab keeps nothing of it (its
    # DevTools session there, with the guard's interception and the caret script, is detached).
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = await context.new_page()
        session = BrowserSession(page, BrowserConfig())
        await session.goto(pages("/opener"))
        await session.click(200, 120)  # opens /tab, which the session follows
        assert session.page is not page
        await session.close()
        field = "<input id=f autofocus><script>document.getElementById('f').focus()</script>"
        await page.goto("data:text/html," + field)  # a new document of the first tab
        caret = await page.evaluate("getComputedStyle(document.getElementById('f')).caretColor")
        assert caret != "rgba(0, 0, 0, 0)"
    finally:
        await context.close()


async def test_closing_an_owned_session_closes_its_context(browser: Browser) -> None:
    session = await BrowserSession.create(browser, BrowserConfig())
    page, context = session.page, session.context
    assert context in browser.contexts
    await session.close()
    assert page.is_closed()
    assert context not in browser.contexts


async def test_a_failed_goto_stays_an_action_error_after_a_tab_closed(session: BrowserSession) -> None:
    """A closed tab seen earlier in the run does not turn a later site failure into a browser crash."""
    session._state.saw_target_closed = True  # as after an action on a tab that closed itself
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ActionError, match="cannot open"):
        await session.goto(f"http://127.0.0.1:{port}/")
    assert not session.browser_crashed
