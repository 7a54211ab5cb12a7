"""Pages that misbehave, served by ``SiteServer`` under ``/trouble/`` for fault tests.

``/trouble/`` is a page of traps, each a 300x50 CSS-pixel block at x 100..400 (centre x 250), one
row every 80 px from y 100 (viewport 1280x800):

====  =====================  =====================================================================
row   centre (CSS px)        what it does when clicked
====  =====================  =====================================================================
0     (250, 125)             a link to ``/trouble/download.bin`` (``Content-Disposition: attachment``)
1     (250, 205)             a file input (``<input type=file>``): opens a file chooser
2     (250, 285)             a link to ``/trouble/loop``, a redirect to itself (redirect loop)
3     (250, 365)             a link to ``/trouble/never-loads``: streams its body forever
4     (250, 445)             a link to ``/trouble/guarded``, a page with a ``beforeunload`` handler
5     (250, 525)             a link to ``/trouble/slow-loop``: a redirect to itself every 0.1 s (the
                             loop fails after Chromium's 20 redirects, ~2 s, past a short settle cap)
====  =====================  =====================================================================

``/trouble/guarded`` asks to confirm leaving (``beforeunload``) once it has been clicked; its own
link back to ``/trouble/`` sits at row 0.
"""

from __future__ import annotations

import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

__all__ = ["TRAPS", "serve_trouble"]

#: Trap name -> centre of its block in CSS pixels.
TRAPS: dict[str, tuple[int, int]] = {
    "download link": (250, 125),
    "file input": (250, 205),
    "redirect loop link": (250, 285),
    "never loading link": (250, 365),
    "guarded page link": (250, 445),
    "slow redirect loop link": (250, 525),
}
DOWNLOAD_NAME = "report.bin"
NEVER_LOADS_TRICKLE_S = 0.2
NEVER_LOADS_MAX_S = 300.0  # a handler thread is never held longer than this
SLOW_LOOP_DELAY_S = 0.1

_STYLE = (
    "<style>body{margin:0;font:16px sans-serif}"
    ".trap{position:absolute;left:100px;width:300px;height:50px;box-sizing:border-box;"
    "display:block;border:1px solid #888;background:#eef}</style>"
)


def _trap(row: int, inner: str) -> str:
    return inner.replace("<TRAP", f'<a class="trap" style="top:{100 + 80 * row}px"', 1)


def _index() -> str:
    rows = [
        _trap(0, "<TRAP href='/trouble/download.bin'>Download the report</a>"),
        f'<input type="file" class="trap" style="top:{100 + 80}px" aria-label="Upload a file">',
        _trap(2, "<TRAP href='/trouble/loop'>A link that redirects forever</a>"),
        _trap(3, "<TRAP href='/trouble/never-loads'>A page that never finishes loading</a>"),
        _trap(4, "<TRAP href='/trouble/guarded'>A page that asks before you leave</a>"),
        _trap(5, "<TRAP href='/trouble/slow-loop'>A link that slowly redirects forever</a>"),
    ]
    return _html("Trouble", "".join(rows))


def _guarded() -> str:
    script = (
        "<script>addEventListener('beforeunload', e => { e.preventDefault(); e.returnValue = 'Leave?'; });</script>"
    )
    return _html("Guarded", _trap(0, "<TRAP href='/trouble/'>Back to the traps</a>") + script)


def _html(title: str, body: str) -> str:
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>{_STYLE}</head><body>{body}</body></html>"


def serve_trouble(handler: BaseHTTPRequestHandler, route: str, stopping: threading.Event) -> bool:
    """Answer a ``/trouble/...`` request; False when ``route`` is not one of these pages."""
    match route:
        case "/trouble":
            _send(handler, HTTPStatus.OK, _index().encode(), "text/html; charset=utf-8")
        case "/trouble/guarded":
            _send(handler, HTTPStatus.OK, _guarded().encode(), "text/html; charset=utf-8")
        case "/trouble/download.bin":
            body = b"webagent test download\n" * 64
            disposition = {"Content-Disposition": f'attachment; filename="{DOWNLOAD_NAME}"'}
            _send(handler, HTTPStatus.OK, body, "application/octet-stream", disposition)
        case "/trouble/loop":
            _send(handler, HTTPStatus.FOUND, b"", "text/plain", {"Location": "/trouble/loop"})
        case "/trouble/slow-loop":
            stopping.wait(SLOW_LOOP_DELAY_S)
            _send(handler, HTTPStatus.FOUND, b"", "text/plain", {"Location": "/trouble/slow-loop"})
        case "/trouble/never-loads":
            _never_loads(handler, stopping)
        case _:
            return False
    return True


def _send(
    handler: BaseHTTPRequestHandler,
    status: HTTPStatus,
    body: bytes,
    content_type: str,
    headers: dict[str, str] | None = None,
) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Cache-Control", "no-store")
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


def _never_loads(handler: BaseHTTPRequestHandler, stopping: threading.Event) -> None:
    """Headers and the start of a page, then a comment every 0.2 s until the browser leaves."""
    handler.send_response(HTTPStatus.OK)
    handler.send_header("Content-Type", "text/html; charset=utf-8")
    handler.send_header("Cache-Control", "no-store")
    handler.send_header("Connection", "close")  # no length: the body ends when the connection does
    handler.end_headers()
    handler.close_connection = True
    if handler.command == "HEAD":
        return
    head = _html("Still loading", "<h1>This page never finishes loading</h1>").removesuffix("</body></html>")
    try:
        handler.wfile.write(head.encode())
        handler.wfile.flush()
        deadline = time.monotonic() + NEVER_LOADS_MAX_S
        while not stopping.wait(NEVER_LOADS_TRICKLE_S) and time.monotonic() < deadline:
            handler.wfile.write(b"<!-- still loading -->\n")
            handler.wfile.flush()
    except OSError:
        pass  # the browser went away: that is how this page ends
