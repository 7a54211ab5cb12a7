"""The soak benchmark's own site: two origins, slow pages, requests that never answer.

One aiohttp process serves the same pages on two ports. ``benchmarks/soak.py`` opens the first
as ``http://127.0.0.1:A`` and the second as ``http://localhost:B``: another port *and* another
host, because Chromium isolates renderers by site (scheme + host; the port is not part of it),
so only a cross-site link makes it swap renderer processes on every crossing.

Every HTML page has the same fixed navigation column on the left (``NAV``): eight full-width
links, 100 CSS pixels tall, so that a click at the centre of row ``i`` — (280, 50 + 100*i) —
hits the same link at any scroll offset. The right part holds the page's own content:

* ``/p`` — a plain page (``/`` too);
* ``/list`` — 2,000 list items (a long page to wheel-scroll; ``items=K`` in the start page's query
  makes it K, carried along every link like ``ms``);
* ``/images`` — 12 PNG images (no-store, fetched again on every visit);
* ``/form`` — a one-field form (the field fixed at ``FIELD``); Enter POSTs to ``/submit``, which
  answers 303 to ``/submitted`` (post/redirect/get, so going back never re-posts);
* ``/slow?ms=M`` — answers after M milliseconds;
* ``/hangpage`` — an image and a ``fetch`` to ``/hang/...``, which never answer: the handler
  waits until the client goes away or the server stops (so the page never fires ``load``);
* the "new tab" row is a ``target=_blank`` link.

HTML is sent with ``Cache-Control: no-store`` (going back reloads it from here). The server takes
thousands of concurrent connections (asyncio; listen backlog 4096). ``GET /_stats`` returns its
counters (``?reset_peak=1``: the peak of open hanging requests restarts from now). Run
``python benchmarks/soaksite/server.py`` by hand; it prints ``soak site listening on
http://127.0.0.1:A http://localhost:B`` when ready and stops on SIGTERM/SIGINT (or, with
``--stdin-eof``, when its stdin closes), answering the requests it holds open first.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import io
import json
import random
import signal
import sys
import threading
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

READY_PREFIX = "soak site listening on "
VIEWPORT = (1280, 800)
ROW_H = 100
NAV_W = 560
#: The navigation column's rows: (element description the scripted localizer knows, label, colour).
NAV: list[tuple[str, str, str]] = [
    ("same-origin page link", "Next page (same site)", "#1565c0"),
    ("other-origin page link", "Next page (other site)", "#6a1b9a"),
    ("slow page link", "Slow page (2-5 s)", "#c62828"),
    ("long list link", "Long list (2,000 items)", "#2e7d32"),
    ("image gallery link", "Image gallery", "#ef6c00"),
    ("form page link", "Form", "#00838f"),
    ("new tab link", "Open a page in a new tab", "#4e342e"),
    ("hanging page link", "Page with a request that never answers", "#37474f"),
]
#: Where each element's centre is, in viewport CSS pixels (what the offline localizer answers).
ELEMENTS: dict[str, tuple[int, int]] = {
    name: (NAV_W // 2, ROW_H // 2 + ROW_H * i) for i, (name, _, _) in enumerate(NAV)
}
FIELD = (NAV_W + 40 + 300, 200)  # the form's text field (600 x 100 at left 600, top 150)
ELEMENTS["form text field"] = FIELD
LIST_ITEMS = 2000
IMAGES = 12

_STYLE = f"""
body {{ margin: 0; font: 20px/1.4 sans-serif; color: #222; }}
nav {{ position: fixed; left: 0; top: 0; width: {NAV_W}px; height: {ROW_H * len(NAV)}px; z-index: 2; }}
nav a {{ display: block; box-sizing: border-box; height: {ROW_H}px; line-height: {ROW_H}px; padding-left: 24px;
  color: #fff; text-decoration: none; font-size: 28px; border-bottom: 2px solid #fff; }}
main {{ margin-left: {NAV_W + 20}px; padding: 12px 20px; }}
#q {{ position: fixed; left: {NAV_W + 40}px; top: 150px; width: 600px; height: 100px; box-sizing: border-box;
  font-size: 36px; }}
li {{ height: 36px; }}
.gallery img {{ width: 220px; height: 160px; margin: 4px; }}
"""


def _png(seed: int, size: tuple[int, int] = (220, 160)) -> bytes:
    """A noisy gradient PNG (noise so that it neither compresses nor encodes to nothing)."""
    from PIL import Image

    rng = random.Random(seed)
    noise = Image.effect_noise(size, 40 + seed).convert("RGB")
    tint = Image.new("RGB", size, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    grad = Image.linear_gradient("L").resize(size).convert("RGB")
    img = Image.blend(Image.blend(noise, tint, 0.5), grad, 0.3)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


class SoakSite:
    def __init__(self) -> None:
        self.origins: list[str] = ["", ""]  # set once both ports are bound
        self.stopping = asyncio.Event()
        self.stats: dict[str, int] = {
            "requests": 0,
            "pages": 0,
            "slow": 0,
            "images": 0,
            "submits": 0,
            "hangs_started": 0,
            "hangs_open": 0,
            "hangs_open_peak": 0,
        }
        self.pngs = [_png(k) for k in range(IMAGES)]
        items = "".join(f"<li>Item {i:04d}: row {i} of the long list</li>" for i in range(1, LIST_ITEMS + 1))
        self._list = f"<ol>{items}</ol>"
        self._lists: dict[int, str] = {LIST_ITEMS: self._list}

    # -- pages ------------------------------------------------------------------------------
    def _origin(self, request: web.Request) -> int:
        """0 for the first origin, 1 for the second (by the port the request came in on)."""
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        port = sock[1] if sock else 0
        return 1 if self.origins[1].endswith(f":{port}") else 0

    def _page(self, request: web.Request, title: str, body: str) -> web.Response:
        self.stats["pages"] += 1
        origin = self._origin(request)
        q = request.query
        token = q.get("t", "anon")
        n = int(q.get("n", "0") or 0) + 1
        ms = q.get("ms", "3000")  # the delay of this task's slow page, carried along
        keep = {"items": q["items"]} if "items" in q else {}  # the long list's length, carried along

        def link(path: str, other: bool = False, **extra: Any) -> str:
            base = self.origins[1 - origin] if other else ""
            return f"{base}{path}?{urlencode({'t': token, 'n': n, 'ms': ms, **keep, **extra})}"

        hrefs = [
            link("/p"),
            link("/p", other=True),
            link("/slow"),
            link("/list"),
            link("/images"),
            link("/form"),
            link("/p", tab=1),
            link("/hangpage"),
        ]
        rows = "".join(
            f'<a href="{html.escape(href)}" style="background:{colour}"'
            + (' target="_blank"' if name == "new tab link" else "")
            + f">{html.escape(label)}</a>"
            for href, (name, label, colour) in zip(hrefs, NAV, strict=True)
        )
        text = (
            f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><nav>{rows}</nav><main><h1>{html.escape(title)}</h1>"
            f"<p>Task {html.escape(token)}, page {n}, origin {origin + 1}.</p>{body}</main></body></html>"
        )
        return web.Response(text=text, content_type="text/html", headers={"Cache-Control": "no-store"})

    async def plain(self, request: web.Request) -> web.Response:
        tab = " (new tab)" if request.query.get("tab") else ""
        para = "<p>" + "Some ordinary text on an ordinary page. " * 20 + "</p>"
        return self._page(request, f"Soak page{tab}", para * 3)

    async def long_list(self, request: web.Request) -> web.Response:
        try:
            count = min(max(int(request.query.get("items", LIST_ITEMS)), 1), 20_000)
        except ValueError:
            count = LIST_ITEMS
        if count not in self._lists:
            items = "".join(f"<li>Item {i:04d}: row {i} of the long list</li>" for i in range(1, count + 1))
            self._lists[count] = f"<ol>{items}</ol>"
        return self._page(request, "Long list", self._lists[count])

    async def images(self, request: web.Request) -> web.Response:
        token = html.escape(request.query.get("t", "anon"))
        visit = random.randrange(1 << 30)
        imgs = "".join(f'<img src="/img/{k}.png?t={token}&v={visit}" alt="image {k}">' for k in range(IMAGES))
        return self._page(request, "Image gallery", f'<div class="gallery">{imgs}</div>')

    async def image(self, request: web.Request) -> web.Response:
        self.stats["images"] += 1
        k = int(request.match_info["k"]) % IMAGES
        return web.Response(body=self.pngs[k], content_type="image/png", headers={"Cache-Control": "no-store"})

    async def form(self, request: web.Request) -> web.Response:
        keep = {k: request.query.get(k, "") for k in ("t", "n", "ms")}
        body = (
            f'<form method="post" action="/submit?{html.escape(urlencode(keep))}"><input id="q" name="q" '
            'placeholder="Type here and press Enter" autocomplete="off"></form>'
        )
        return self._page(request, "Form", body)

    async def submit(self, request: web.Request) -> web.Response:
        self.stats["submits"] += 1
        data = await request.post()
        keep = {k: request.query.get(k, "") for k in ("t", "n", "ms")}
        query = urlencode({**keep, "q": str(data.get("q", ""))})
        raise web.HTTPSeeOther(f"/submitted?{query}")

    async def submitted(self, request: web.Request) -> web.Response:
        value = html.escape(request.query.get("q", ""))
        return self._page(request, "Form submitted", f"<p>The form was submitted with {value!s}.</p>")

    async def slow(self, request: web.Request) -> web.Response:
        self.stats["slow"] += 1
        try:
            ms = min(max(int(request.query.get("ms", "3000")), 0), 60_000)
        except ValueError:
            ms = 3000
        await asyncio.sleep(ms / 1000)
        return self._page(request, "Slow page", f"<p>This page took {ms} ms to answer.</p>")

    async def hang_page(self, request: web.Request) -> web.Response:
        token = html.escape(request.query.get("t", "anon"))
        body = (
            f'<p>The image below and a fetch never answer.</p><img src="/hang/img?t={token}" width="400" height="200">'
            f"<script>fetch('/hang/fetch?t={token}').catch(() => {{}});</script>"
        )
        return self._page(request, "Hanging request", body)

    async def hang(self, request: web.Request) -> web.Response:
        """Never answers: waits until the client goes away (the handler is cancelled) or the server stops."""
        self.stats["hangs_started"] += 1
        self.stats["hangs_open"] += 1
        self.stats["hangs_open_peak"] = max(self.stats["hangs_open_peak"], self.stats["hangs_open"])
        try:
            await self.stopping.wait()
        finally:
            self.stats["hangs_open"] -= 1
        return web.Response(status=503, text="stopping")

    async def stats_view(self, request: web.Request) -> web.Response:
        """The counters; with ``?reset_peak=1`` the peak of open hanging requests starts again from now."""
        reply = web.json_response(dict(self.stats))
        if request.query.get("reset_peak"):
            self.stats["hangs_open_peak"] = self.stats["hangs_open"]
        return reply

    @web.middleware
    async def count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.stats["requests"] += 1
        return await handler(request)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.count])
        app.add_routes(
            [
                web.get("/", self.plain),
                web.get("/p", self.plain),
                web.get("/list", self.long_list),
                web.get("/images", self.images),
                web.get(r"/img/{k:\d+}.png", self.image),
                web.get("/form", self.form),
                web.post("/submit", self.submit),
                web.get("/submitted", self.submitted),
                web.get("/slow", self.slow),
                web.get("/hangpage", self.hang_page),
                web.get("/hang/{kind}", self.hang),
                web.get("/_stats", self.stats_view),
            ]
        )
        return app


async def serve(port_a: int, port_b: int, host_b: str, stdin_eof: bool = False) -> None:
    site = SoakSite()
    # handler_cancellation: a client that goes away (a page navigated away from) ends its hanging request.
    runner = web.AppRunner(site.app(), handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    ports = []
    for port in (port_a, port_b):
        tcp = web.TCPSite(runner, "127.0.0.1", port, backlog=4096)
        await tcp.start()
        ports.append(tcp._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    site.origins = [f"http://127.0.0.1:{ports[0]}", f"http://{host_b}:{ports[1]}"]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if stdin_eof:  # the parent holds our stdin: it closes when the parent exits, however it exits

        def watch() -> None:
            sys.stdin.read()
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=watch, daemon=True).start()
    print(READY_PREFIX + " ".join(site.origins), flush=True)
    await stop.wait()
    site.stopping.set()  # the hanging requests answer now
    await asyncio.sleep(0.2)
    await runner.cleanup()
    print(json.dumps(site.stats), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port-a", type=int, default=0, help="port of the first origin (0: any free port)")
    parser.add_argument("--port-b", type=int, default=0, help="port of the second origin (0: any free port)")
    parser.add_argument(
        "--host-b",
        default="localhost",
        help="host name of the second origin in links (localhost: another site, so Chromium swaps renderer "
        "processes; 127.0.0.1: the same site on another port)",
    )
    parser.add_argument("--stdin-eof", action="store_true", help="also stop when stdin reaches its end")
    args = parser.parse_args()
    asyncio.run(serve(args.port_a, args.port_b, args.host_b, args.stdin_eof))


if __name__ == "__main__":
    main()
