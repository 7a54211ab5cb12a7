"""Who may talk to a server of ours (``webagent mcp --http``, ``webagent env serve``): Host and Origin
checks on every bind address, and bearer tokens, on HTTP requests and WebSocket handshakes alike.

DNS rebinding: a web page on ``http://evil.example:8765`` whose name the attacker then points at
the server's address makes the visitor's browser a client of the server, with ``Host:
evil.example:8765`` and (same-origin to the browser) ``Origin: http://evil.example:8765``; a
browser opens a WebSocket to any origin and sends its own ``Origin`` with the handshake. So,
whatever address the server is bound to (``127.0.0.2``, ``0.0.0.0``, a LAN address, not only the
three the MCP SDK knows), for a request and for a WebSocket handshake:

* the ``Host`` header must be an IP address (no name to rebind), ``localhost``, the name the server
  was bound by, or this machine's host name;
* an ``Origin`` header, when sent (browsers do; other clients need not), must be a loopback origin
  (a local tool such as an MCP inspector) or the origin of the ``Host`` the request was sent to;
* with tokens (``webagent.serving.tokens``) every request must carry ``Authorization: Bearer
  <token>`` of one of them (compared in constant time), except a ``GET`` of a public path (a
  container's health check: ``/health`` of the environment server).

Refusals are plain HTTP errors: 421 (Host), 403 (Origin), 401 (token, with ``WWW-Authenticate``);
a WebSocket handshake refused gets the same status as its HTTP answer (the ASGI denial response),
or, on a server that cannot send one, a close before it is accepted (which the server answers 403).

A request let through carries who its client is (``client_of``): its token (``token 2``) when the
server holds several, else its peer's address.
"""

from __future__ import annotations

import hmac
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

import structlog
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..guard.hosts import canonical_host, ip_of

__all__ = ["CLIENT_KEY", "HTTPGate", "client_of"]

log = structlog.get_logger("webagent.serving")

#: The scope key under which the gate leaves who the client is.
CLIENT_KEY = "webagent.client"
_DENIAL = "websocket.http.response"  # the ASGI extension of an HTTP answer to a WebSocket handshake


def client_of(scope: Scope) -> str:
    """Who sent a request the gate let through: ``token N`` (several tokens) or the peer's address."""
    found = scope.get(CLIENT_KEY)
    return found if isinstance(found, str) else _peer(scope)


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "?"


def _is_loopback(host: str) -> bool:
    """Whether a canonical host names this machine's loopback (``localhost``, ``127.x``, ``::1``)."""
    ip = ip_of(host)
    return host == "localhost" if ip is None else ip.is_loopback


def _host_of(authority: str) -> str | None:
    """The canonical host of a ``Host`` header value (``name:port``, ``[::1]:port``, ``1.2.3.4``)."""
    text = authority.strip()
    if text.startswith("["):
        host, sep, _ = text.partition("]")
        return canonical_host(host + "]") if sep else None
    name, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    if port and not port.isdigit():
        return None
    return canonical_host(name) if name else None


class HTTPGate:
    """The ASGI app in front of a server's app: refuses a request or a WebSocket handshake whose Host,
    Origin or token is wrong; tells the app who the client is (``client_of``)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        bind_host: str,
        tokens: Sequence[str] = (),
        realm: str = "webagent",
        public_paths: Sequence[str] = (),
    ) -> None:
        """``tokens``: the bearer tokens accepted (none: no token asked); ``realm``: the server's name in
        ``WWW-Authenticate`` and the log; ``public_paths``: paths a ``GET`` of needs no token."""
        self.app = app
        self.tokens = [t.encode() for t in tokens]
        self.realm = realm
        self.public_paths = frozenset(public_paths)
        self.names = {"localhost"}
        bound = canonical_host(f"[{bind_host}]" if ":" in bind_host else bind_host)
        if bound is not None and ip_of(bound) is None:
            self.names.add(bound)
        machine = canonical_host(socket.gethostname())
        if machine is not None:
            self.names.add(machine)

    def host_ok(self, host: str | None) -> bool:
        return host is not None and (ip_of(host) is not None or host in self.names)

    def origin_ok(self, origin: str, host: str) -> bool:
        try:
            parts = urlsplit(origin)
            _ = parts.port  # a malformed port is a malformed origin
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False  # "null" (a sandboxed frame, a file: page) included
        origin_host = canonical_host(f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname)
        return origin_host is not None and (_is_loopback(origin_host) or origin_host == host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        public = scope["type"] == "http" and scope.get("method") == "GET" and scope.get("path") in self.public_paths
        refusal = self.refusal(headers, token=not public)
        if refusal is None:
            scope[CLIENT_KEY] = self._client(headers, scope)
            await self.app(scope, receive, send)
            return
        status, text, extra = refusal
        log.warning(
            "http_refused", server=self.realm, kind=scope["type"], status=status, reason=text, client=_peer(scope)
        )
        if scope["type"] == "websocket" and _DENIAL not in scope.get("extensions", {}):
            await receive()  # the handshake (websocket.connect), answered with a close: a 403
            await send({"type": "websocket.close", "code": 1008})
            return
        await Response(text, status_code=status, headers=extra)(scope, receive, send)

    def refusal(self, headers: Headers, *, token: bool = True) -> tuple[int, str, dict[str, str]] | None:
        """(status, text, extra headers) of the reply refusing a request with ``headers``; None to serve
        it. ``token``: whether the request must carry a token (when the server has any)."""
        raw_host = headers.get("host")
        host = _host_of(raw_host) if raw_host else None
        if host is None or not self.host_ok(host):
            return 421, "Invalid Host header", {}
        origin = headers.get("origin")
        if origin is not None and not self.origin_ok(origin, host):
            return 403, "Invalid Origin header", {}
        if token and self.tokens and self._token_index(headers) is None:
            return 401, "Missing or wrong bearer token", {"WWW-Authenticate": f'Bearer realm="{self.realm}"'}
        return None

    def _token_index(self, headers: Headers) -> int | None:
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        given = value.strip().encode()
        found = None
        for index, token in enumerate(self.tokens):  # every one compared: the time says nothing of which
            if hmac.compare_digest(given, token) and found is None:
                found = index
        return found

    def _client(self, headers: Headers, scope: Scope) -> str:
        if len(self.tokens) > 1:
            index = self._token_index(headers)
            if index is not None:
                return f"token {index + 1}"
        return _peer(scope)
