"""HTTP under the model client: a one-method seam (``Transport``) and its aiohttp implementation.

The model client only ever POSTs a JSON body it encoded itself and reads the whole reply, so the
seam is that one call: ``post(url, body, headers, timeout_s) -> HTTPReply``. A reply with any
status is an ``HTTPReply``; no reply at all (refused or dropped connection, timeout) is a
``TransportError``. Retries, error messages and failover live in ``client.py``; tests can put a
fake transport under a real ``ModelClient``.

``AiohttpTransport`` keeps one connection pool per event loop; the default transport
(``http11.DefaultTransport``) uses it for TLS, proxies and 307/308 redirects only. aiohttp's C-accelerated HTTP
stack costs ~0.2 ms of CPU for a 400 KB chat request where the openai SDK's httpx stack took
~1 ms (``benchmarks/throughput.py`` measures what that is worth per agent step).
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

__all__ = ["AiohttpTransport", "HTTPReply", "Transport", "TransportError", "parse_retry_after", "proxy_for"]


@dataclass(frozen=True, slots=True)
class HTTPReply:
    """A complete HTTP reply: status, the ``Retry-After`` hint in seconds (if any) and the body."""

    status: int
    body: bytes
    retry_after_s: float | None = None


class TransportError(Exception):
    """No HTTP reply came back: the connection was refused or dropped, or ``timeout_s`` passed."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class Transport(Protocol):
    """What the model client needs from HTTP."""

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HTTPReply:
        """POST ``body`` to ``url``; the whole reply, or TransportError when there is none."""
        ...

    async def aclose(self) -> None:
        """Close pooled connections (the transport may be used again afterwards)."""
        ...


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class AiohttpTransport:
    """Pooled HTTP/1.1 keep-alive connections through aiohttp (proxies from the environment)."""

    # The model client posts to a handful of URLs, so the per-URL proxy cache stays tiny.

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        self._proxies: dict[str, str | None] = {}

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # A session belongs to the loop it was made in; a new loop (another asyncio.run) gets
            # its own. The old one's connections died with its loop.
            # No trust_env: aiohttp would then read ~/.netrc and the proxy variables in worker
            # threads on every request; the proxy is looked up once per URL instead (_proxy).
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent",),
            )
            self._loop = loop
        return self._session

    def _timeout(self, seconds: float) -> aiohttp.ClientTimeout:
        timeout = self._timeouts.get(seconds)
        if timeout is None:
            timeout = self._timeouts[seconds] = aiohttp.ClientTimeout(total=seconds)
        return timeout

    def _proxy(self, url: str) -> str | None:
        try:
            return self._proxies[url]
        except KeyError:
            proxy = self._proxies[url] = proxy_for(url)
            return proxy

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HTTPReply:
        try:
            async with self._client().post(
                url,
                data=body,
                headers=dict(headers),
                timeout=self._timeout(timeout_s),
                allow_redirects=True,  # as the openai SDK does (a proxy's http->https 308, ...)
                proxy=self._proxy(url),
            ) as response:
                data = await response.read()
                return HTTPReply(response.status, data, parse_retry_after(response.headers.get("Retry-After")))
        except TimeoutError:
            raise TransportError(f"no reply within {timeout_s:g} s", timeout=True) from None
        except aiohttp.ClientError as exc:
            raise TransportError(_describe(exc)) from None
        except OSError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from None

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self._loop:
                await session.close()
        self._loop = None


def proxy_for(url: str) -> str | None:
    """The proxy for ``url`` from HTTP(S)_PROXY / NO_PROXY, as other HTTP clients find it."""
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or (parts.hostname and urllib.request.proxy_bypass(parts.netloc)):
        return None
    return proxy


def _describe(exc: aiohttp.ClientError) -> str:
    """A short reason: "connection refused", "server disconnected", ..."""
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"TLS failed ({exc.host}:{exc.port}): {exc.os_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        error = exc.os_error
        if isinstance(error, socket.gaierror):
            reason = f"cannot resolve the host: {error.strerror or error}"
        elif error.errno:
            reason = os.strerror(error.errno)
        else:
            reason = error.strerror or str(error) or "cannot connect"
        return f"{reason.lower()} ({exc.host}:{exc.port})"
    if isinstance(exc, aiohttp.NonHttpUrlClientError | aiohttp.InvalidURL):
        return f"not an http(s) URL: {exc}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without a reply"
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
