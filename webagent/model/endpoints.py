"""The servers of a role (``EndpointPool``): one ``AsyncOpenAI`` per endpoint over one pooled HTTP
client, picked by load, shared by every session."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI, RequestOptions

from .._version import __version__
from ..config import RoleConfig
from ..errors import ModelError

__all__ = ["ENDPOINT_COOLDOWN_S", "Endpoint", "EndpointPool"]

ENDPOINT_COOLDOWN_S = 30.0


# The SDK's telemetry headers (``X-Stainless-*``) are left out: an OpenAI-compatible server has no
# use for them and each one is parsed and normalised by httpx on every request. Retries are ours,
# so the SDK's retry count would always say 0 anyway.
_OMITTED_HEADERS = (
    "X-Stainless-Lang",
    "X-Stainless-Package-Version",
    "X-Stainless-OS",
    "X-Stainless-Arch",
    "X-Stainless-Runtime",
    "X-Stainless-Runtime-Version",
    "X-Stainless-Async",
    "X-Stainless-Retry-Count",
    "X-Stainless-Read-Timeout",
)


class Endpoint:
    """One server of a role, with its load: requests in flight and sessions stuck to it."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.in_flight = 0
        self.sessions = 0
        self.down_until = 0.0
        self.client: AsyncOpenAI | None = None  # made on first use, in the running event loop

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
        headers: dict[str, Any] = dict.fromkeys(_OMITTED_HEADERS, openai.omit)
        headers["Content-Type"] = "application/json"
        self.options: RequestOptions = {
            "headers": headers,
            "timeout": config.timeout_s,
            "max_retries": 0,
            "security": {"bearer_auth": True},
        }

    def client(self, endpoint: Endpoint) -> AsyncOpenAI:
        """The SDK client of ``endpoint`` (one per endpoint, shared by every session)."""
        if self._given is None and self._loop is not asyncio.get_running_loop():
            # The default client's connections belong to the loop they were made in; a new loop
            # (another asyncio.run: an Agent run twice without aclose) gets its own. The old
            # ones died with their loop.
            self._loop = asyncio.get_running_loop()
            self._http = openai.DefaultAioHttpClient(timeout=self.config.timeout_s)
            for e in self.endpoints:
                e.client = None
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
                e.client = None
        if http is None or http is self._given or http.is_closed:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # a client of a closed loop cannot be closed any more
            await http.aclose()


def default_api_key() -> str:
    return os.environ.get("OPENAI_API_KEY") or "EMPTY"
