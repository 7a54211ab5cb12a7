"""Small local websites for tests, demos and offline benchmarks.

``SiteServer`` serves the static sites under ``webagent/testing/data/sites`` on 127.0.0.1 and adds a few
dynamic routes:

* ``/catalog/search?q=...`` -- case-insensitive substring search over the product names;
  each hit is a fixed-height row (row ``i`` is centred at CSS pixel (650, 242 + 72*i)).
* ``/catalog/product/<id>`` -- product page with name and price (``swap_products`` breaks the
  site on purpose: the page of another product is served at a product's URL).
* ``/form/submit`` (GET or POST) -- validates and records a registration in
  :attr:`SiteServer.submissions` and renders a confirmation page with a reference code
  ``REF-<initials>-<country code>``.
* ``/safety/...`` -- pages for the navigation-policy and secrets tests (see
  :mod:`webagent.testing.safetysites`).
* ``/trouble/...`` -- pages that misbehave (a download, a file chooser, a redirect loop, a page
  that never finishes loading, a ``beforeunload`` guard); see :mod:`webagent.testing.trouble`.
* ``/downloads/...`` -- downloads that misbehave (any name, any size, slow, cut off, a flood of
  them, a link to one on another host); see :mod:`webagent.testing.downloadsite`.
* ``/hands/...`` -- a page for each of the agent's pointer hands and tabs (a hover menu, a range
  selected with shift held, a grid edited after a double-click, a context menu, a drag-and-drop board, a slider, a panel that
  scrolls in a page that does not, a coupon in a second tab, a six-field form); each reports the
  real event it saw to ``/hands/event`` (:attr:`SiteServer.hand_events`); see
  :mod:`webagent.testing.hands`.

Run ``python -m webagent.testing.sites [--port N]`` to serve them by hand.
"""

from __future__ import annotations

import argparse
import mimetypes
import signal
import socket
import socketserver
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from types import FrameType, TracebackType
from typing import Self, cast
from urllib.parse import parse_qs, unquote, urlsplit

from . import safetysites
from .catalog import (
    COUNTRIES,
    PRODUCTS,
    PRODUCTS_BY_ID,
    Product,
    page,
    reference_code,
    render_confirmation,
    render_form_errors,
    render_product,
    render_product_missing,
    render_search,
    search_products,
    validate_registration,
)
from .downloadsite import serve_downloads
from .trouble import serve_trouble

__all__ = [
    "COUNTRIES",
    "PRODUCTS",
    "Product",
    "SiteServer",
    "data_dir",
    "main",
    "reference_code",
    "search_products",
    "sites_dir",
]

_MAX_BODY = 64 * 1024


def data_dir() -> Path:
    """The bundled demo data (``webagent/testing/data``, package data read through
    ``importlib.resources``): ``local.jsonl`` (the local tasks), ``scripts/`` (the offline model
    server's scripts that solve them) and ``sites/`` (the static sites they run on)."""
    return Path(str(resources.files(__package__) / "data"))


def sites_dir() -> Path:
    """The directory holding the static task sites (``webagent/testing/data/sites``)."""
    return data_dir() / "sites"


# --------------------------------------------------------------------------- HTTP


def _first_values(query: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}


class _Handler(BaseHTTPRequestHandler):
    server_version = "webagent-sites/1.0"
    sys_version = ""

    @property
    def site(self) -> SiteServer:
        return cast(_HTTPServer, self.server).site

    def log_message(self, format: str, *args: object) -> None:  # quiet: no per-request lines
        return

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    # -- helpers

    def _send(
        self,
        status: HTTPStatus,
        body: bytes,
        content_type: str = "text/html; charset=utf-8",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_html(self, status: HTTPStatus, text: str) -> None:
        self._send(status, text.encode("utf-8"))

    def _send_error_page(self, status: HTTPStatus) -> None:
        text = page(
            f"{status.value} {status.phrase}",
            "/catalog/style.css",
            f'<h1 class="product-name" data-testid="error">{status.value} {status.phrase}</h1>\n',
        )
        self._send_html(status, text)

    def _read_form_body(self) -> dict[str, str]:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        raw = self.rfile.read(min(max(length, 0), _MAX_BODY)) if length > 0 else b""
        return _first_values(raw.decode("utf-8", errors="replace"))

    # -- routing

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path, errors="replace")
        segments = path.split("/")
        if not path.startswith("/") or "\\" in path or "\x00" in path or any(seg in ("..", ".") for seg in segments):
            self._send_error_page(HTTPStatus.FORBIDDEN)
            return
        route = path.rstrip("/") or "/"

        if path.startswith("/safety/"):
            self._safety(method, route, parts.query)
            return
        if route == "/catalog/search":
            if method == "POST":
                self._send_error_page(HTTPStatus.METHOD_NOT_ALLOWED)
                return
            query = _first_values(parts.query).get("q", "")
            self._send_html(HTTPStatus.OK, render_search(query))
            return
        if path.startswith("/catalog/product/"):
            if method == "POST":
                self._send_error_page(HTTPStatus.METHOD_NOT_ALLOWED)
                return
            product_id = path[len("/catalog/product/") :].strip("/")
            product = PRODUCTS_BY_ID.get(self.site.swap_products.get(product_id, product_id))
            if product is None:
                self._send_html(HTTPStatus.NOT_FOUND, render_product_missing(product_id))
            else:
                self._send_html(HTTPStatus.OK, render_product(product))
            return
        if route == "/form/submit":
            fields = self._read_form_body() if method == "POST" else _first_values(parts.query)
            values, problems = validate_registration(fields)
            if values is None:
                self._send_html(HTTPStatus.BAD_REQUEST, render_form_errors(problems))
                return
            if method != "HEAD":
                self.site.record_submission(values)
            self._send_html(HTTPStatus.OK, render_confirmation(values))
            return
        if route == "/hands/event":  # what a hands page saw happen (webagent.testing.hands)
            self.site.record_hand_event(_first_values(parts.query))
            self._send(HTTPStatus.NO_CONTENT, b"")
            return
        if route == "/favicon.ico":
            self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
            return
        if method == "POST":
            self._send_error_page(HTTPStatus.METHOD_NOT_ALLOWED)
            return
        if route.startswith("/trouble") and serve_trouble(self, route, self.site.stopping):
            return
        if route == "/downloads/file":
            self.site.record_download_hit(self.headers.get("Host", ""), self.path)
        if route.startswith("/downloads/") and serve_downloads(self, route, parts.query, self.site.stopping):
            return
        self._serve_static(path, parts.query)

    def _safety(self, method: str, route: str, query: str) -> None:
        host = self.headers.get("Host", "")
        self.site.record_safety_hit(host, route + (f"?{query}" if query else ""))
        fields = _first_values(query)
        if route == "/safety":
            other = f"http://localhost:{self.site.port}"
            self._send_html(HTTPStatus.OK, safetysites.render_safety_index(other))
        elif route == "/safety/target":
            self._send_html(HTTPStatus.OK, safetysites.render_target(fields.get("via", "")))
        elif route == "/safety/redirect":
            self._send(HTTPStatus.FOUND, b"", headers={"Location": fields.get("to", "/safety/")})
        elif route == "/safety/login" and "user" in fields:
            self.site.record_login({"user": fields["user"], "code": fields.get("code", "")})
            other = f"http://localhost:{self.site.port}" if fields.get("then") == "exfil" else ""
            code = fields.get("code", "")
            self._send_html(HTTPStatus.OK, safetysites.render_signed_in(fields["user"], exfil_to=other, code=code))
        elif route == "/safety/login":
            self._send_html(HTTPStatus.OK, safetysites.render_login(fields.get("then", "")))
        else:
            self._send_error_page(HTTPStatus.NOT_FOUND)

    def _serve_static(self, path: str, query: str) -> None:
        root = self.site.root
        target = (root / path.lstrip("/")).resolve()
        if not target.is_relative_to(root):
            self._send_error_page(HTTPStatus.FORBIDDEN)
            return
        if target.is_dir():
            if not path.endswith("/"):
                location = path + "/" + (f"?{query}" if query else "")
                self._send(HTTPStatus.MOVED_PERMANENTLY, b"", headers={"Location": location})
                return
            target = target / "index.html"
        if not target.is_file():
            self._send_error_page(HTTPStatus.NOT_FOUND)
            return
        content_type = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if content_type.startswith("text/") or content_type in ("application/javascript", "application/json"):
            content_type += "; charset=utf-8"
        self._send(HTTPStatus.OK, target.read_bytes(), content_type)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], site: SiteServer) -> None:
        self.site = site
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), which may block on DNS; skip it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: object) -> None:
        if isinstance(sys.exception(), ConnectionError | TimeoutError):
            return  # the browser went away mid-response: not worth a traceback
        super().handle_error(request, client_address)


class SiteServer:
    """Serves ``webagent/testing/data/sites`` (or ``root``) on ``host:port`` from a background daemon thread.

    >>> with SiteServer() as site:  # doctest: +SKIP
    ...     page.goto(site.url + "/catalog/")
    """

    def __init__(
        self,
        root: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        swap_products: dict[str, str] | None = None,
    ) -> None:
        """``swap_products``: product id -> the id of the product whose page its URL serves (a
        broken site for tests; the dict may be changed while serving)."""
        #: Product id -> id of the product whose page is served at its URL instead.
        self.swap_products: dict[str, str] = dict(swap_products or {})
        self.root = (root if root is not None else sites_dir()).resolve()
        if not self.root.is_dir():
            raise FileNotFoundError(f"task sites directory not found: {self.root}")
        self.host = host
        self._requested_port = port
        self.submissions: list[dict[str, str]] = []
        self.safety_hits: list[tuple[str, str]] = []
        #: Each /downloads/file request: (Host header, path and query).
        self.download_hits: list[tuple[str, str]] = []
        self.logins: list[dict[str, str]] = []
        #: What the /hands/ pages reported (each an event's fields, ``page`` among them).
        self.hand_events: list[dict[str, str]] = []
        self.stopping = threading.Event()  # releases handlers that hold a response open
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port once started (the requested one before)."""
        if self._httpd is not None:
            return self._httpd.server_port
        return self._requested_port

    @property
    def url(self) -> str:
        """Base URL without a trailing slash, e.g. ``http://127.0.0.1:41234``."""
        if self._httpd is None:
            raise RuntimeError("SiteServer is not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def expand(self, template: str) -> str:
        """Replace the ``{base}`` placeholder used in ``webagent/testing/data/local.jsonl`` with :attr:`url`."""
        return template.replace("{base}", self.url)

    def record_submission(self, values: dict[str, str]) -> None:
        with self._lock:
            self.submissions.append(dict(values))

    def record_safety_hit(self, host: str, path: str) -> None:
        with self._lock:
            self.safety_hits.append((host, path))

    def record_download_hit(self, host: str, path: str) -> None:
        with self._lock:
            self.download_hits.append((host, path))

    def record_login(self, values: dict[str, str]) -> None:
        with self._lock:
            self.logins.append(dict(values))

    def record_hand_event(self, values: dict[str, str]) -> None:
        with self._lock:
            self.hand_events.append(dict(values))

    def clear_submissions(self) -> None:
        with self._lock:
            self.submissions.clear()

    def start(self) -> Self:
        if self._httpd is not None:
            raise RuntimeError("SiteServer is already started")
        httpd = _HTTPServer((self.host, self._requested_port), self)
        self.stopping.clear()
        thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"webagent-sites:{httpd.server_port}",
            daemon=True,
        )
        thread.start()
        self._httpd, self._thread = httpd, thread
        return self

    def stop(self) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._httpd = self._thread = None
        self.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m webagent.testing.sites", description="Serve the local webagent task sites."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (default: a free port)")
    parser.add_argument(
        "--root", type=Path, default=None, help="sites directory (default: webagent/testing/data/sites)"
    )
    args = parser.parse_args(argv)

    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    with SiteServer(root=args.root, host=args.host, port=args.port) as site:
        print(f"webagent task sites listening on {site.url}", flush=True)
        while not stop.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
