"""Downloads that misbehave, served by ``SiteServer`` under ``/downloads/`` for the download tests.

* ``/downloads/file?name=NAME&bytes=N`` -- an attachment named ``NAME`` (``Content-Disposition``,
  ``filename*`` in UTF-8: any name, a path or control characters included) of ``N`` bytes
  (``FILE_BYTE`` repeated). ``&chunked=1``: no ``Content-Length`` (its size is known only as it
  comes); ``&slow=S``: a 64 KiB chunk every ``S`` seconds; ``&cut=1``: the connection closes half
  way (a failed download).
* ``/downloads/link?href=URL`` -- a page whose one link (``LINK``, a 300x50 block) goes to ``URL``,
  e.g. a file above or one on another host; ``&attr=NAME``: the link has ``download="NAME"``.
* ``/downloads/flood?n=N`` -- a page whose button (``LINK``) starts ``N`` downloads at once, each
  in a hidden frame of its own (Chromium lets a frame start about ten a second itself; frames
  together start them all), ``flood-I.txt`` of ``FLOOD_BYTES`` bytes each.
"""

from __future__ import annotations

import html
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, quote

__all__ = ["FILE_BYTE", "FLOOD_BYTES", "LINK", "MAX_FILE_BYTES", "file_path", "serve_downloads"]

#: The centre of the one link (or button) of ``/downloads/link`` and ``/downloads/flood``.
LINK = (250, 125)
FILE_BYTE = b"w"
FLOOD_BYTES = 16
#: The largest file served (the size limit's tests need a few MiB past a small limit, never more).
MAX_FILE_BYTES = 256 * 1024 * 1024
_CHUNK = 64 * 1024
_MAX_FLOOD = 5000
_STYLE = (
    "<style>body{margin:0;font:16px sans-serif}#go{position:absolute;left:100px;top:100px;width:300px;"
    "height:50px;box-sizing:border-box;display:block;border:1px solid #888;background:#eef}</style>"
)


def file_path(name: str, size: int, **options: str) -> str:
    """The path of ``/downloads/file`` for an attachment ``name`` of ``size`` bytes."""
    extra = "".join(f"&{key}={quote(value)}" for key, value in options.items())
    return f"/downloads/file?name={quote(name, safe='')}&bytes={size}{extra}"


def serve_downloads(handler: BaseHTTPRequestHandler, route: str, query: str, stopping: threading.Event) -> bool:
    """Answer a ``/downloads/...`` request; False when ``route`` is not one of these."""
    fields = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
    match route:
        case "/downloads/file":
            _file(handler, fields, stopping)
        case "/downloads/link":
            attr = f' download="{html.escape(fields["attr"])}"' if "attr" in fields else ""
            link = f'<a id="go" href="{html.escape(fields.get("href", "/"))}"{attr}>Download the file</a>'
            _page(handler, "Download", link)
        case "/downloads/flood":
            n = min(_int(fields.get("n"), 1000), _MAX_FLOOD)
            script = (
                "<script>function flood(){for(let i=0;i<" + str(n) + ";i++){const f=document.createElement('iframe');"
                "f.style.display='none';f.src='/downloads/file?name=flood-'+i+'.txt&bytes=" + str(FLOOD_BYTES) + "';"
                "document.body.appendChild(f);}}</script>"
            )
            _page(handler, "Flood", f'<button id="go" onclick="flood()">Download {n} files</button>{script}')
        case _:
            return False
    return True


def _int(value: str | None, default: int) -> int:
    try:
        return max(0, int(value)) if value is not None else default
    except ValueError:
        return default


def _page(handler: BaseHTTPRequestHandler, title: str, body: str) -> None:
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>{_STYLE}</head><body>{body}</body></html>"
    data = page.encode()
    handler.send_response(HTTPStatus.OK)
    handler.send_header("Content-Type", "text/html; charset=utf-8")
    handler.send_header("Content-Length", str(len(data)))
    handler.send_header("Cache-Control", "no-store")
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(data)


def _file(handler: BaseHTTPRequestHandler, fields: dict[str, str], stopping: threading.Event) -> None:
    size = min(_int(fields.get("bytes"), 1024), MAX_FILE_BYTES)
    name = fields.get("name", "file.bin")
    handler.send_response(HTTPStatus.OK)
    handler.send_header("Content-Type", "application/octet-stream")
    handler.send_header("Content-Disposition", f"attachment; filename*=UTF-8''{quote(name, safe='')}")
    handler.send_header("Cache-Control", "no-store")
    if fields.get("chunked") or fields.get("cut"):
        handler.send_header("Connection", "close")  # the body ends when the connection does
        handler.close_connection = True
    if not fields.get("chunked"):
        handler.send_header("Content-Length", str(size))
    handler.end_headers()
    if handler.command == "HEAD":
        return
    slow = float(fields["slow"]) if fields.get("slow") else 0.0
    send = size // 2 if fields.get("cut") else size
    try:
        while send > 0 and not stopping.is_set():
            chunk = min(_CHUNK, send)
            handler.wfile.write(FILE_BYTE * chunk)
            handler.wfile.flush()
            send -= chunk
            if slow:
                stopping.wait(slow)
    except OSError:
        pass  # the browser cancelled it: that is how a refused download ends
    if fields.get("cut"):
        time.sleep(0.05)
