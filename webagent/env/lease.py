"""Session leases: each episode holds its browser context through a lease, and a lease ends.

A ``SessionLease`` owns what an episode opened (``Runtime.open_episode``: a fresh browser context,
so no cookie, storage or service worker outlives the episode) and closes it exactly once: when
the episode ends, when its holder (an environment object) is garbage-collected, or when nobody
has called it for ``idle_timeout_s`` (an abandoned OpenEnv client, a trainer that crashed between
steps). The ``LeaseKeeper`` of each event loop runs the idle check; a lease in use (a step in
flight) is never reaped. Whoever calls next learns why the lease ended (``closed_reason``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator

import structlog

__all__ = ["LeaseKeeper", "SessionLease", "lease_keeper"]

log = structlog.get_logger("webagent.env")

#: Seconds closing one lease's context may take (the browser may not answer).
CLOSE_TIMEOUT_S = 60.0


class SessionLease:
    """One episode's hold on its browser context (see the module docstring)."""

    def __init__(self, stack: contextlib.AsyncExitStack, *, idle_timeout_s: float | None) -> None:
        self._stack: contextlib.AsyncExitStack | None = stack
        self.idle_timeout_s = idle_timeout_s
        self.touched = time.monotonic()
        self.busy = 0
        #: Why the lease ended (None while it holds its context).
        self.closed_reason: str | None = None
        self._closing: asyncio.Task[None] | None = None

    @property
    def stack(self) -> contextlib.AsyncExitStack:
        """What the lease closes (while it is open)."""
        assert self._stack is not None, "the lease is closed"
        return self._stack

    @property
    def closed(self) -> bool:
        return self.closed_reason is not None

    @property
    def idle_s(self) -> float:
        return time.monotonic() - self.touched

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[None]:
        """Hold the lease for one call: it is not reaped meanwhile, and its idle time restarts."""
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
            self.touched = time.monotonic()

    def reapable(self, now: float) -> bool:
        return (
            not self.closed
            and self.busy == 0
            and self.idle_timeout_s is not None
            and now - self.touched > self.idle_timeout_s
        )

    async def close(self, reason: str) -> None:
        """Close the context (once; later calls wait for the first)."""
        if self._closing is None:
            if self.closed_reason is None:
                self.closed_reason = reason
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            return
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await stack.aclose()
        except Exception as exc:  # the context may be gone with its browser: nothing more to close
            log.warning("lease_close_failed", reason=self.closed_reason, error=str(exc))

    def abandon(self, loop: asyncio.AbstractEventLoop, reason: str) -> None:
        """Close from anywhere (a finalizer, another thread): scheduled on the lease's loop."""
        if self.closed or loop.is_closed():
            return

        def start() -> None:
            if not self.closed:
                loop.create_task(self.close(reason))

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(start)


class LeaseKeeper:
    """The leases of one event loop and the task that reaps idle ones."""

    def __init__(self) -> None:
        self.leases: weakref.WeakSet[SessionLease] = weakref.WeakSet()
        self.reaped = 0
        self._task: asyncio.Task[None] | None = None

    def adopt(self, lease: SessionLease) -> None:
        self.leases.add(lease)
        if lease.idle_timeout_s is not None and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._reap(), name="webagent-lease-reaper")

    @property
    def active(self) -> int:
        return sum(1 for lease in self.leases if not lease.closed)

    async def _reap(self) -> None:
        while True:
            timeouts = [
                lease.idle_timeout_s for lease in self.leases if not lease.closed and lease.idle_timeout_s is not None
            ]
            if not timeouts:
                return
            await asyncio.sleep(min(max(min(timeouts) / 4, 0.05), 5.0))
            now = time.monotonic()
            for lease in [lease for lease in self.leases if lease.reapable(now)]:
                self.reaped += 1
                log.warning("lease_idle", idle_s=round(lease.idle_s, 1), limit_s=lease.idle_timeout_s)
                await lease.close(f"the session was closed after {lease.idle_timeout_s:g} s without a call")


_keepers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LeaseKeeper] = weakref.WeakKeyDictionary()


def lease_keeper() -> LeaseKeeper:
    """The running loop's keeper."""
    loop = asyncio.get_running_loop()
    keeper = _keepers.get(loop)
    if keeper is None:
        keeper = _keepers[loop] = LeaseKeeper()
    return keeper
