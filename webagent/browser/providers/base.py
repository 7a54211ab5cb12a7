"""The browser-provider seam: a ``BrowserProvider`` hands out ``Lease``s (a browser endpoint and how
many sessions it takes) and takes them back; the fleet pool (``pool.FleetPool``) places sessions on
them. Every call the pool makes to a provider is bounded (``timeout_s``): a provider that raises or
hangs is a ``BrowserError`` naming it, never a hung batch."""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar
from urllib.parse import urlsplit

import aiohttp

from ...errors import BrowserError

__all__ = ["BrowserProvider", "Lease", "Protocol", "ProviderError", "bounded", "reachable"]

Protocol = Literal["cdp", "playwright"]
T = TypeVar("T")


class ProviderError(BrowserError):
    """A browser provider failed or did not answer in time: the infrastructure's failure (a batch
    re-runs the session's task), never the task's."""

    infrastructure = True


@dataclass(frozen=True, eq=False)
class Lease:
    """One browser host lent by a provider: ``endpoint`` reached over ``protocol`` (``cdp``: a
    Chromium's remote-debugging URL; ``playwright``: a Playwright browser server), taking ``sessions``
    at once; ``headers`` go with every connection (a token: never logged or shown); ``name`` is the
    host's name in summaries. ``handle``: the provider's own, for ``release``."""

    name: str
    endpoint: str
    sessions: int
    protocol: Protocol = "cdp"
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    handle: object = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.sessions < 1:
            raise BrowserError(f"browser host {self.name}: a lease must take at least one session")
        if urlsplit(self.endpoint).scheme not in ("ws", "wss", "http", "https"):
            raise BrowserError(f"browser host {self.name}: endpoint must be a ws(s):// or http(s):// URL")


class BrowserProvider(abc.ABC):
    """Hands out browser hosts. ``acquire`` lends one more (None: it has no more to lend now),
    ``release`` takes one back, ``probe`` says whether one answers; ``aclose`` ends what it started.
    Each is given the time it has (``timeout_s``) and is cut off past it."""

    #: The provider's name in errors and logs.
    name: str = "provider"
    #: Whether the pool leases every host it can at start (a static list) or one at a time as needed.
    eager: bool = False

    @abc.abstractmethod
    async def acquire(self, *, timeout_s: float) -> Lease | None:
        """One more host to place sessions on, or None when there is none to lend now."""

    async def release(self, lease: Lease, *, timeout_s: float) -> None:
        """``lease`` is no longer used (the pool closed its connections)."""
        return None

    async def probe(self, lease: Lease, *, timeout_s: float) -> bool:
        """Whether ``lease``'s host answers (default: ``reachable``)."""
        return await reachable(lease, timeout_s=timeout_s)

    async def aclose(self, *, timeout_s: float) -> None:
        """Everything the provider started, ended."""
        return None


async def bounded(what: Awaitable[T], provider: BrowserProvider, call: str, timeout_s: float) -> T:
    """``what`` (a call into ``provider``) within ``timeout_s``; its failure or a hang as a
    ``ProviderError`` naming the provider and the call (an infrastructure failure)."""
    try:
        async with asyncio.timeout(timeout_s):
            return await what
    except TimeoutError:
        raise ProviderError(f"browser provider {provider.name}: {call} gave no answer within {timeout_s:g} s") from None
    except BrowserError:
        raise
    except Exception as exc:  # a third party's code: any failure is its own, told in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ProviderError(f"browser provider {provider.name}: {call} failed: {type(exc).__name__}: {first}") from None


async def reachable(lease: Lease, *, timeout_s: float) -> bool:
    """Whether ``lease``'s host answers: a CDP host's ``/json/version`` (over http(s), beside its
    WebSocket for a ws:// URL), a Playwright server's port taking a connection."""
    parts = urlsplit(lease.endpoint)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    with contextlib.suppress(OSError, TimeoutError, aiohttp.ClientError, ValueError):
        async with asyncio.timeout(timeout_s):
            if lease.protocol == "cdp":
                scheme = "https" if parts.scheme in ("https", "wss") else "http"
                url = f"{scheme}://{parts.netloc.rpartition('@')[2]}/json/version"
                async with (
                    aiohttp.ClientSession() as client,
                    client.get(url, headers=dict(lease.headers)) as reply,
                ):
                    return reply.status < 500
            _, writer = await asyncio.open_connection(host, port)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True
    return False
