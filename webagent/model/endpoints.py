"""The servers of a role (``EndpointPool``): one ``AsyncOpenAI`` per endpoint over one pooled HTTP
client, picked by load, shared by every session.

The SDK client of an endpoint is its configuration: base URL, API key (or ``OPENAI_API_KEY``), the
headers it sends (``OPENAI_CUSTOM_HEADERS`` included) and the pooled ``httpx2`` client (the SDK's
aiohttp-backed one: proxies, TLS). A request is built from them once per endpoint
(``EndpointPool.request``: the headers resolved once) and sent on that HTTP client: the SDK's own
request path (options model, headers merged and validated, timeout parsed, idempotency key, auth
retry wrapper) cost a third of the client's CPU per request for no use here (0.67-0.94 ms a ~405 kB
request through it, 0.48-0.60 without: ``benchmarks/model_cpu.py client``, alternating rounds).
"""

from __future__ import annotations

import asyncio
import os
import time

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

    def load(self) -> tuple[bool, int, int]:
        return (time.monotonic() < self.down_until, self.in_flight, self.sessions)


class EndpointPool:
    """The servers of one role, shared by every session, over one pool of HTTP connections.

    ``http_client`` replaces the ``httpx2.AsyncClient`` under the SDK (tests pass one with an
    ``httpx2.MockTransport``); the caller closes it. By default the pool makes the SDK's
    aiohttp-backed client (proxies from ``HTTP(S)_PROXY``/``NO_PROXY``, TLS trust from the system),
    one per event loop, and closes it in ``aclose``.
    """

    def __init__(self, role: str, config: RoleConfig, http_client: httpx2.AsyncClient | None = None) -> None:
        urls = config.endpoints() if config.model else []
        self.role = role
        self.config = config
        self.endpoints = [Endpoint(url) for url in urls]
        self._given = http_client
        self._http: httpx2.AsyncClient | None = http_client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timeout = httpx2.Timeout(config.timeout_s)

    def request(self, endpoint: Endpoint, content: bytes) -> tuple[httpx2.AsyncClient, httpx2.Request]:
        """A chat request of ``content`` (a JSON body) to ``endpoint``, with the headers its SDK client
        sends (auth, ``User-Agent``, custom headers; not the SDK's telemetry), and the HTTP client
        to send it on (which follows redirects, as the SDK's does)."""
        client = self.client(endpoint)
        headers = endpoint.headers
        if headers is None:
            headers = endpoint.headers = _sent_headers(client)
        http = self._http
        assert http is not None  # made with the client
        # The HTTP client's own headers and cookies (a load balancer's sticky session) as the SDK's request has them.
        return http, http.build_request("POST", endpoint.url, headers=headers, content=content, timeout=self._timeout)

    def client(self, endpoint: Endpoint) -> AsyncOpenAI:
        """The SDK client of ``endpoint`` (one per endpoint, shared by every session)."""
        if self._given is None and self._loop is not asyncio.get_running_loop():
            # The default client's connections belong to the loop they were made in; a new loop
            # (another asyncio.run: an Agent run twice without aclose) gets its own. The old
            # ones died with their loop.
            self._loop = asyncio.get_running_loop()
            self._http = openai.DefaultAioHttpClient(timeout=self.config.timeout_s)
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
        http, loop = self._http, self._loop
        if self._given is None:
            self._http = self._loop = None
            for e in self.endpoints:
                e.client, e.headers = None, None
        if http is None or http is self._given or http.is_closed:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # a client of a closed loop cannot be closed any more
            await http.aclose()


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
