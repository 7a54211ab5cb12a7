"""A small local shop for the shell tests: a sign-in form (a password), items added by a button, a
menu shown on hover, a CSV download, a table, a link that opens a tab, a button that does nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

__all__ = ["PASSWORD", "shop"]

PASSWORD = "hunter2-Secret-Value"

_LOGIN = """<!doctype html><title>Sign in</title><h1>Sign in</h1>
<form method="post" action="/login">
<label>User <input name="user"></label>
<label>Password <input name="password" type="password"></label>
<button type="submit">Sign in</button></form>"""

_ITEMS = """<!doctype html><title>Items</title>
<style>#menu-list{display:none} #menu:hover #menu-list{display:block} body{font:16px sans-serif}</style>
<h1>Items of alice</h1>
<div id="menu"><span role="button" aria-label="Menu">Menu ▾</span>
  <ul id="menu-list"><li><a href="/export.csv" download>Export CSV</a></li></ul></div>
<p><label>New item <input id="new" placeholder="item name"></label>
<button onclick="add()">Add item</button>
<button onclick="void 0">Does nothing</button>
<a href="/help" target="_blank">Help</a></p>
<table id="items"><tr><th>Name</th><th>Qty</th></tr><tr><td>Apple</td><td>3</td></tr></table>
<script>
function add() {
  const v = document.getElementById('new').value;
  const row = document.createElement('tr');
  row.innerHTML = '<td></td><td>1</td>';
  row.firstChild.textContent = v;
  document.getElementById('items').appendChild(row);
}
</script>"""


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(
        self, body: str, *, kind: str = "text/html; charset=utf-8", headers: dict[str, str] | None = None
    ) -> None:
        data = body.encode()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path in ("/", "/login"):
            self._send(_LOGIN)
        elif path == "/items":
            if "session=alice" not in (self.headers.get("Cookie") or ""):
                self.send_response(HTTPStatus.FOUND)
                self.send_header("Location", "/login")
                self.end_headers()
                return
            self._send(_ITEMS)
        elif path == "/export.csv":
            self._send(
                "name,qty\nApple,3\n",
                kind="text/csv",
                headers={"Content-Disposition": 'attachment; filename="items.csv"'},
            )
        elif path == "/help":
            self._send("<!doctype html><title>Help</title><h1>Help</h1><p>Ask us.</p>")
        else:
            self.send_error(HTTPStatus.NOT_FOUND)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode())
        ok = form.get("user") == ["alice"] and form.get("password") == [PASSWORD]
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", "/items" if ok else "/login?failed")
        if ok:
            self.send_header("Set-Cookie", "session=alice; Path=/; HttpOnly")
        self.end_headers()


@contextmanager
def shop() -> Iterator[str]:
    """The shop on a free loopback port: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
