"""The servers of a role (``EndpointPool``): one ``AsyncOpenAI`` per endpoint, picked by load, shared
by every session, over one pool of HTTP connections.

The SDK client of an endpoint is its configuration: base URL, API key (or ``OPENAI_API_KEY``) and
the headers it sends (``OPENAI_CUSTOM_HEADERS`` included), resolved once per endpoint. A request is
that endpoint's chat URL, those headers and the encoded body (``EndpointPool.send``), sent on the
pool's own ``aiohttp`` session, set up as the SDK's aiohttp transport sets up its own (its
connection limit and keep-alive, httpx2's TLS context, the role's timeout on connect and read):
neither the SDK's request path (options model, headers merged and validated, timeout parsed,
idempotency key) nor httpx2's layer over aiohttp (a request and a response built and mapped again)
runs, 0.35-0.38 ms of CPU a ~405 kB request against 0.48-0.52 through httpx2's layer
(``benchmarks/model_cpu.py client``). Where httpx2's rules decide, the request goes through the
SDK's httpx2 client instead, as before: a proxy named in the environment (httpx2 picks one per URL),
a redirect (what it keeps of the request, and the next hop's proxy), and a caller's ``http_client``
(tests script one with an ``httpx2.MockTransport``).
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.request
from collections.abc import Mapping

import aiohttp
import httpx2
import openai
from openai import AsyncOpenAI

from .._version import __version__
from ..config import RoleConfig
from ..errors import ModelError

__all__ = ["ENDPOINT_COOLDOWN_S", "Endpoint", "EndpointPool"]

ENDPOINT_COOLDOWN_S = 30.0


# The SDK's telemetry headers (``X-Stainless-*``) are left out: an OpenAI-compatible server has no
# use for them. Retries are ours, so the SDK's retry count would always say 0 anyway.
_OMITTED_PREFIX = "x-stainless-"


class Endpoint:
    """One server of a role, with its load: requests in flight and sessions stuck to it."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.in_flight = 0
        self.sessions = 0
        self.down_until = 0.0
        self.client: AsyncOpenAI | None = None  # made on first use, in the running event loop
        self.headers: httpx2.Headers | None = None  # what its client sends with every request
        self.sent: dict[str, str] = {}  # the same, as aiohttp takes them
        self.direct = False  # its requests go on the pool's aiohttp session (no proxy, no caller's client)

    def load(self) -> tuple[bool, int, int]:
        return (time.monotonic() < self.down_until, self.in_flight, self.sessions)


class EndpointPool:
    """The servers of one role, shared by every session, over one pool of HTTP connections.

    ``http_client`` replaces the ``httpx2.AsyncClient`` under the SDK (tests pass one with an
    ``httpx2.MockTransport``) and sends every request; the caller closes it. By default the pool
    makes its ``aiohttp`` session and the SDK's aiohttp-backed client (proxies, redirects), one of
    each per event loop, and closes them in ``aclose``.
    """

    def __init__(self, role: str, config: RoleConfig, http_client: httpx2.AsyncClient | None = None) -> None:
        urls = config.endpoints() if config.model else []
        self.role = role
        self.config = config
        self.endpoints = [Endpoint(url) for url in urls]
        self._given = http_client
        self._http: httpx2.AsyncClient | None = http_client
        self._session: aiohttp.ClientSession | None = None  # the pool's connections (no http_client given)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timeout = httpx2.Timeout(config.timeout_s)
        t = config.timeout_s  # as the SDK's aiohttp transport passes an httpx2.Timeout(t)
        self._aiohttp_timeout = aiohttp.ClientTimeout(sock_connect=t, sock_read=t, connect=t)

    async def send(self, endpoint: Endpoint, content: bytes) -> tuple[int, Mapping[str, str], bytes]:
        """POST ``content`` (a JSON chat body) to ``endpoint`` with the headers its SDK client sends
        (auth, ``User-Agent``, custom headers; not the SDK's telemetry), redirects followed as the
        SDK's client follows them: the reply's status, headers and body. Raises what aiohttp or
        httpx2 raise: no deadline of its own beyond the role's timeout on connect and read (the
        caller bounds the whole exchange)."""
        client = self.client(endpoint)
        if endpoint.headers is None:
            endpoint.headers = _sent_headers(client)
            endpoint.sent = dict(endpoint.headers.items())
            endpoint.direct = self._given is None and not _proxied()
        if endpoint.direct:
            session = self._session
            assert session is not None  # made with the client
            async with session.post(
                endpoint.url, data=content, headers=endpoint.sent, timeout=self._aiohttp_timeout, allow_redirects=False
            ) as reply:
                if not (300 <= reply.status < 400 and "Location" in reply.headers):
                    return reply.status, reply.headers, await reply.read()
            endpoint.direct = False  # it redirects: httpx2's from now on, not a redirect a request
        # A caller's client, a proxy named in the environment, or a redirect: httpx2's rules (which
        # proxy for which URL, what a redirect keeps), as the SDK's client applies them.
        http = self._http
        assert http is not None  # made with the client
        # The HTTP client's own headers and cookies (a load balancer's sticky session) as the SDK's request has them.
        request = http.build_request(
            "POST", endpoint.url, headers=endpoint.headers, content=content, timeout=self._timeout
        )
        response = await http.send(request)
        return response.status_code, response.headers, response.content

    def client(self, endpoint: Endpoint) -> AsyncOpenAI:
        """The SDK client of ``endpoint`` (one per endpoint, shared by every session)."""
        if self._given is None and self._loop is not asyncio.get_running_loop():
            # The default client's connections belong to the loop they were made in; a new loop
            # (another asyncio.run: an Agent run twice without aclose) gets its own. The old
            # ones died with their loop.
            self._loop = asyncio.get_running_loop()
            self._http = openai.DefaultAioHttpClient(timeout=self.config.timeout_s)  # the SDK client's (never sent on)
            self._session = _session()
            for e in self.endpoints:
                e.client, e.headers = None, None
        client = endpoint.client
        if client is None:
            api_key = self.config.api_key or default_api_key()
            if not (api_key.isascii() and api_key.isprintable()):  # would be refused, or split the header
                raise ModelError(
                    f"the {self.role} model's API key has a line break or a non-ASCII character; check the API key",
                    role=self.role,
                )
            client = endpoint.client = AsyncOpenAI(
                base_url=endpoint.base_url,
                api_key=api_key,
                max_retries=0,
                timeout=self.config.timeout_s,
                default_headers={"User-Agent": f"webagent/{__version__}"},
                http_client=self._http,
            )
        return client

    def pick(self, exclude: Endpoint | None = None) -> Endpoint:
        """The least-loaded endpoint (healthy first, then fewest requests in flight, then sessions)."""
        if not self.endpoints:
            raise ModelError(f"the {self.role} model has no base_url/model configured", role=self.role)
        candidates = [e for e in self.endpoints if e is not exclude] or self.endpoints
        return min(candidates, key=Endpoint.load)

    async def aclose(self) -> None:
        """Close the pool's own HTTP connections (it opens new ones if used again)."""
        http, session, loop = self._http, self._session, self._loop
        if self._given is None:
            self._http = self._session = self._loop = None
            for e in self.endpoints:
                e.client, e.headers = None, None
        if http is None or http is self._given:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # a client of a closed loop cannot be closed any more
            if session is not None and not session.closed:
                await session.close()
            if not http.is_closed:
                await http.aclose()


def _session() -> aiohttp.ClientSession:
    """The pool's connections, as the SDK's aiohttp transport makes them (its connection limit,
    keep-alive and TLS trust), cookies kept from any host (a load balancer's sticky session at an
    IP address too). Not aiohttp's ``trust_env``: it would look each host up in ``~/.netrc`` on
    every request, in a thread, and refuse the request it finds there."""
    limits = openai.DEFAULT_CONNECTION_LIMITS
    connector = aiohttp.TCPConnector(
        limit=limits.max_connections or 0,
        keepalive_timeout=limits.keepalive_expiry,
        ssl=httpx2.create_ssl_context(trust_env=True),
    )
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.CookieJar(unsafe=True))


def _proxied() -> bool:
    """Whether the environment names a proxy (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, any
    ``*_PROXY`` but ``NO_PROXY``): then requests go through httpx2, which picks the proxy of each
    URL by its own rules (schemes added, ``NO_PROXY``'s CIDR ranges, IPv6 hosts and ``*``)."""
    return any(scheme != "no" for scheme in urllib.request.getproxies())


def _sent_headers(client: AsyncOpenAI) -> httpx2.Headers:
    """The headers the SDK client would send, merged as it merges them: names in any case, each
    layer over the one before (the API key's ``Authorization``, then the client's defaults and
    ``OPENAI_CUSTOM_HEADERS``, then the body's type), ``Omit`` removing one; its telemetry left out."""
    merged = httpx2.Headers()
    for layer in (client.auth_headers, client.default_headers, {"Content-Type": "application/json"}):
        for name, value in layer.items():
            if name in merged:
                del merged[name]
            if isinstance(value, str) and not name.lower().startswith(_OMITTED_PREFIX):
                merged[name] = value
    return merged


def default_api_key() -> str:
    return os.environ.get("OPENAI_API_KEY") or "EMPTY"
