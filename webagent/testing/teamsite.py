"""A local site behind a login, for the features web teams need (tests, demos, benchmarks).

``TeamSite`` serves on 127.0.0.1 (and answers as ``localhost`` too: a second site for
cross-origin frames) with fixed layouts, so that scripted localizers know where things are
(CSS pixels of a 1280x800 viewport):

* ``/login`` -- user field at (400, 200), password field at (400, 280) (Enter submits): the right
  pair (``USER``, ``PASSWORD``) leads to ``/2fa``, code field at (400, 200): ``OTP_CODE`` signs in,
  setting an HttpOnly session cookie and a token in local storage, then goes to ``next``;
* ``/app/`` and ``/app/item/<n>`` (n = 1..``ITEMS``) -- only signed in (else to ``/login?next=``):
  "Item n status: <word>" (``item_status(n)``); ``/app/whoami`` shows the session cookie's value in
  its URL and title (what redaction must catch);
* ``/echo`` -- what the browser sent and is (headers, locale, time zone, user agent, viewport,
  touch, colour scheme, geolocation), shown and posted to ``/echo/report`` (``reports``);
* ``/basic`` -- HTTP Basic authentication (``BASIC_USER`` / ``BASIC_PASSWORD``);
* ``/upload`` (file input at (400, 200)) and ``/upload/button`` (a button at (400, 200) that opens
  a hidden file input): the chosen file is posted at once (``uploads``);
* ``/frames/`` -- controls in an open shadow root, a same-origin iframe and a cross-origin one
  (``webagent.testing.teampages``); each control reports what happened to it (``events``).

Every request is recorded (``requests``: method, path, headers), so tests can check what reached
the site (a proxy, a header, a cookie).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import BodyPartReader, web

from .teampages import (
    ECHO_PAGE,
    LOGIN_PAGE,
    OTP_PAGE,
    UPLOAD_BUTTON_PAGE,
    UPLOAD_PAGE,
    frames_page,
    inner_frame_page,
    item_page,
    page,
)
from .threaded import LoopThread, serve_app

__all__ = [
    "BASIC_PASSWORD",
    "BASIC_USER",
    "ITEMS",
    "OTP_CODE",
    "PASSWORD",
    "USER",
    "TeamSite",
    "item_status",
]

USER = "ada"
PASSWORD = "correct-horse-battery-42"
OTP_CODE = "424242"
BASIC_USER = "inspector"
BASIC_PASSWORD = "basic-pass-7781"
ITEMS = 20
_STATUSES = ("shipped", "pending", "returned", "delivered", "cancelled")


def item_status(n: int) -> str:
    """The status shown on item ``n``'s page."""
    return _STATUSES[(n * 7) % len(_STATUSES)]


@dataclass
class Request:
    method: str
    path: str
    host: str
    headers: dict[str, str]


@dataclass
class TeamSite:
    """The site; start with ``with TeamSite() as site:`` (a thread of its own)."""

    host: str = "127.0.0.1"
    port: int = 0
    requests: list[Request] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    uploads: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    #: Sessions signed in so far (the count of full sign-ins: password and code).
    sign_ins: int = 0
    _sessions: dict[str, str] = field(default_factory=dict)  # sid -> user
    _pending: dict[str, str] = field(default_factory=dict)  # pending token -> user
    _thread: LoopThread = field(default_factory=lambda: LoopThread("team-site"))
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def other_origin(self) -> str:
        """The same server as another site (``localhost``): what a cross-origin frame loads."""
        return f"http://localhost:{self.port}"

    def paths(self, prefix: str = "") -> list[str]:
        """The paths requested so far that start with ``prefix``."""
        return [r.path for r in self.requests if r.path.startswith(prefix)]

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> Self:
        self._thread.start(self._start)
        return self

    def __exit__(self, *exc: object) -> None:
        runner = self._runner
        self._thread.stop(runner.cleanup if runner is not None else None)

    async def _start(self) -> None:
        app = web.Application(middlewares=[self._record], client_max_size=8 * 1024 * 1024)
        app.add_routes(
            [
                web.get("/login", self._login_page),
                web.post("/login", self._login),
                web.get("/2fa", self._otp_page),
                web.post("/2fa", self._otp),
                web.get("/logout", self._logout),
                web.get("/app/", self._app),
                web.get("/app/item/{n}", self._item),
                web.get("/app/whoami", self._whoami),
                web.get("/echo", self._echo),
                web.post("/echo/report", self._report),
                web.get("/basic", self._basic),
                web.get("/upload", self._upload_page),
                web.get("/upload/button", self._upload_page),
                web.post("/upload", self._upload),
                web.get("/frames/", self._frames),
                web.get("/frames/inner", self._inner),
                web.post("/frames/event", self._event),
            ]
        )
        self._runner, self.port = await serve_app(app, self.host, self.port)

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append(Request(request.method, request.path_qs, request.host, dict(request.headers)))
        response: web.StreamResponse = await handler(request)
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    # -- signing in ----------------------------------------------------------------------------

    def user_of(self, request: web.Request) -> str | None:
        return self._sessions.get(request.cookies.get("sid", ""))

    async def _login_page(self, request: web.Request) -> web.Response:
        return _html(LOGIN_PAGE.replace("{next}", _attr(_decode(request.query.get("next", "")))))

    async def _login(self, request: web.Request) -> web.Response:
        form = await request.post()
        nxt = str(form.get("next") or "/app/")
        if form.get("user") != USER or form.get("password") != PASSWORD:
            return _html(page("Sign in failed", "<p id=error>Wrong user or password.</p>"), status=401)
        token = secrets.token_urlsafe(24)
        self._pending[token] = USER
        response = web.HTTPSeeOther(f"/2fa?next={_encode(nxt)}")
        response.set_cookie("pending", token, httponly=True, path="/")
        raise response

    async def _otp_page(self, request: web.Request) -> web.Response:
        if request.cookies.get("pending", "") not in self._pending:
            raise web.HTTPSeeOther("/login")
        return _html(OTP_PAGE.replace("{next}", _attr(_decode(request.query.get("next", "")))))

    async def _otp(self, request: web.Request) -> web.Response:
        form = await request.post()
        user = self._pending.pop(request.cookies.get("pending", ""), None)
        if user is None or form.get("code") != OTP_CODE:
            return _html(page("Sign in failed", "<p id=error>Wrong code.</p>"), status=401)
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = user
        self.sign_ins += 1
        nxt = str(form.get("next") or "/app/")
        token = secrets.token_hex(20)
        body = (
            f"<p>Signed in.</p><script>localStorage.setItem('team.token', {json.dumps(token)});"
            f"location.replace({json.dumps(nxt if nxt.startswith('/') else '/app/')});</script>"
        )
        response = _html(page("Signed in", body))
        response.set_cookie("sid", sid, httponly=True, path="/", samesite="Lax")
        response.del_cookie("pending", path="/")
        return response

    async def _logout(self, request: web.Request) -> web.Response:
        self._sessions.pop(request.cookies.get("sid", ""), None)
        response = web.HTTPSeeOther("/login")
        response.del_cookie("sid", path="/")
        raise response

    def _signed_in(self, request: web.Request) -> str:
        user = self.user_of(request)
        if user is None:
            raise web.HTTPSeeOther(f"/login?next={_encode(request.path)}")
        return user

    async def _app(self, request: web.Request) -> web.Response:
        user = self._signed_in(request)
        links = "".join(f"<li><a href='/app/item/{n}'>Item {n}</a></li>" for n in range(1, ITEMS + 1))
        return _html(page("Dashboard", f"<p id=who>Signed in as {user}</p><ul>{links}</ul>"))

    async def _whoami(self, request: web.Request) -> web.Response:
        """A debug page that puts the session id in its URL and title (what redaction must catch)."""
        user = self._signed_in(request)
        sid = request.cookies.get("sid", "")
        if request.query.get("session") != sid:
            raise web.HTTPSeeOther(f"/app/whoami?session={sid}")
        return _html(page(f"Session {sid}", f"<p id=who>{user}, session {sid}</p>"))

    async def _item(self, request: web.Request) -> web.Response:
        self._signed_in(request)
        try:
            n = int(request.match_info["n"])
        except ValueError:
            raise web.HTTPNotFound() from None
        if not 1 <= n <= ITEMS:
            raise web.HTTPNotFound()
        return _html(item_page(n, item_status(n)))

    # -- what the browser is -------------------------------------------------------------------

    async def _echo(self, request: web.Request) -> web.Response:
        shown = {k: v for k, v in request.headers.items() if k.lower() not in ("cookie",)}
        rows = "".join(f"<tr><th>{_attr(k)}</th><td>{_attr(v)}</td></tr>" for k, v in shown.items())
        return _html(ECHO_PAGE.replace("{rows}", rows))

    async def _report(self, request: web.Request) -> web.Response:
        data = await request.json()
        data["headers"] = dict(request.headers)
        self.reports.append(data)
        return web.json_response({"ok": True})

    async def _basic(self, request: web.Request) -> web.Response:
        expected = base64.b64encode(f"{BASIC_USER}:{BASIC_PASSWORD}".encode()).decode()
        if request.headers.get("Authorization") != f"Basic {expected}":
            return web.Response(
                status=401, text="Authentication required", headers={"WWW-Authenticate": 'Basic realm="team"'}
            )
        return _html(page("Welcome", f"<p id=welcome>Welcome, {BASIC_USER}</p>"))

    # -- uploads and frames --------------------------------------------------------------------

    async def _upload_page(self, request: web.Request) -> web.Response:
        return _html(UPLOAD_BUTTON_PAGE if request.path.endswith("/button") else UPLOAD_PAGE)

    async def _upload(self, request: web.Request) -> web.Response:
        reader = await request.multipart()
        received: list[str] = []
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader) or not part.filename:
                continue
            data = await part.read()
            origin = request.query.get("from", "upload")
            self.uploads.append(
                {"from": origin, "name": part.filename, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            )
            received.append(f"{part.filename} ({len(data)} bytes)")
        text = ", ".join(received) or "nothing"
        return _html(page("Uploaded", f"<p id=received>Received {_attr(text)}</p>"))

    async def _frames(self, request: web.Request) -> web.Response:
        return _html(frames_page(same="/frames/inner?who=same", cross=f"{self.other_origin}/frames/inner?who=cross"))

    async def _inner(self, request: web.Request) -> web.Response:
        who = request.query.get("who", "same")
        response = _html(inner_frame_page(who, shadow=who == "cross"))
        return response

    async def _event(self, request: web.Request) -> web.Response:
        self.events.append(await request.json())
        return web.json_response({"ok": True})


def _encode(path: str) -> str:
    """Where to go after signing in, as the ``next`` parameter: base64url (so that the sign-in pages'
    URLs never contain the path they lead to)."""
    return base64.urlsafe_b64encode(path.encode()).decode().rstrip("=")


def _decode(value: str) -> str:
    try:
        path = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return "/app/"
    return path if path.startswith("/") else "/app/"


def _html(text: str, *, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


def _attr(text: str) -> str:
    return (
        text.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#39;")
    )
