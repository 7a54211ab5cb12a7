"""Who may talk to ``webagent mcp --http``: Host and Origin checks on every bind address, and an
optional bearer token.

DNS rebinding: a web page on ``http://evil.example:8765`` whose name the attacker then points at
the server's address makes the visitor's browser a client of the server, with ``Host:
evil.example:8765`` and (same-origin to the browser) ``Origin: http://evil.example:8765``. So,
whatever address the server is bound to (``127.0.0.2``, ``0.0.0.0``, a LAN address, not only the
three the SDK knows):

* the ``Host`` header must be an IP address (no name to rebind), ``localhost``, the name the server
  was bound by, or this machine's host name;
* an ``Origin`` header, when sent (browsers do; other clients need not), must be a loopback origin
  (a local tool such as an MCP inspector) or the origin of the ``Host`` the request was sent to;
* with a token (``--auth-token`` or ``WEBAGENT_MCP_AUTH_TOKEN``) every request must carry
  ``Authorization: Bearer <token>`` (compared in constant time).

Refusals are plain HTTP errors: 421 (Host), 403 (Origin), 401 (token, with ``WWW-Authenticate``).
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from urllib.parse import urlsplit

import structlog
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..hosts import canonical_host, ip_of

__all__ = ["HTTPGate", "is_loopback_bind"]

log = structlog.get_logger("webagent.mcp")


def is_loopback_bind(address: str) -> bool:
    """Whether a bound socket's address (an IP) is reachable from this machine only."""
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


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
    """The ASGI app in front of the MCP app: refuses a request whose Host, Origin or token is wrong."""

    def __init__(self, app: ASGIApp, *, bind_host: str, token: str | None = None) -> None:
        self.app = app
        self.token = token.encode() if token else None
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
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self.refusal(headers)
        if refusal is not None:
            status, text, extra = refusal
            log.warning("mcp_http_refused", status=status, reason=text, client=_client(scope))
            await Response(text, status_code=status, headers=extra)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, headers: Headers) -> tuple[int, str, dict[str, str]] | None:
        """(status, text, extra headers) of the reply refusing a request with ``headers``; None to serve it."""
        raw_host = headers.get("host")
        host = _host_of(raw_host) if raw_host else None
        if host is None or not self.host_ok(host):
            return 421, "Invalid Host header", {}
        origin = headers.get("origin")
        if origin is not None and not self.origin_ok(origin, host):
            return 403, "Invalid Origin header", {}
        if self.token is not None:
            scheme, _, value = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), self.token):
                return 401, "Missing or wrong bearer token", {"WWW-Authenticate": 'Bearer realm="webagent mcp"'}
        return None


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"
