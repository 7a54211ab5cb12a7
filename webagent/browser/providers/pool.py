"""``FleetPool``: the browser pool over a provider's leases (``[browser] provider = "hosts"`` or a
plugin). Sessions are placed by load: each new one on the healthy host with the lowest share of its
sessions in use, up to its capacity. A probe asks every host now and then whether it answers
(``probe_interval_s``, within ``probe_timeout_s``); a host that does not, or whose connection is
lost under its sessions, is quarantined: no session goes to it, its connections are closed so that
its sessions fail at once (a crash, which a batch re-runs on another host as infrastructure), and it
is probed again until it answers, then used again. A connection is otherwise the base pool's
"browser": recycled, replaced, counted."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from playwright.async_api import Browser, Playwright

from ...config import BrowserConfig
from ...errors import BrowserError, BrowserTimeoutError, ConfigError
from ..deadline import within
from ..guard import NavigationGuard
from ..hardening import hardening_refusal
from ..pool import BrowserPool, PooledBrowser
from ..session import BrowserSession
from .base import BrowserProvider, Lease, ProviderError, bounded
from .connect import connect_lease

__all__ = ["FleetPool", "HostFigures", "session_host"]

log = structlog.get_logger("webagent.browser")

#: The name of the browser host the current run's session is on ("" where there is no fleet).
session_host: contextvars.ContextVar[str] = contextvars.ContextVar("session_host", default="")


@dataclass(frozen=True)
class HostFigures:
    """One host's counts: sessions opened on it, times it was lost under sessions (``crashes``) and
    the sessions lost with it, times quarantined, and whether it is now."""

    sessions: int
    crashes: int
    lost_sessions: int
    quarantines: int
    quarantined: bool


@dataclass(eq=False)
class _Host:
    lease: Lease
    sessions: int = 0
    crashes: int = 0
    lost: int = 0
    quarantines: int = 0
    quarantined: bool = False
    #: Why it cannot carry guarded sessions (its hardening not shown), once asked.
    unguardable: str | None = None


class FleetPool(BrowserPool):
    """A ``BrowserPool`` whose browsers are connections to a provider's leased hosts."""

    launch_tries = 1  # a host that cannot be reached is quarantined and another one tried

    def __init__(self, config: BrowserConfig, provider: BrowserProvider) -> None:
        super().__init__(config)
        self.provider = provider
        self._hosts: list[_Host] = []
        self._host_of: dict[Browser, _Host] = {}
        self._target: _Host | None = None
        self._room = asyncio.Event()
        self._prober: asyncio.Task[None] | None = None
        self._closers: set[asyncio.Task[None]] = set()

    # -- figures ---------------------------------------------------------------------------------

    def host_figures(self) -> dict[str, HostFigures]:
        """Each leased host's counts, by name."""
        return {
            h.lease.name: HostFigures(h.sessions, h.crashes, h.lost, h.quarantines, h.quarantined) for h in self._hosts
        }

    def _load(self, host: _Host) -> int:
        return sum(s.active for s in self._slots if self._host_of.get(s.browser) is host and not s.retiring)

    def _placement(self, hardened: bool) -> _Host | None:
        """The healthy host with room and the lowest share of its sessions in use."""
        open_hosts = [
            h
            for h in self._hosts
            if not h.quarantined and not (hardened and h.unguardable) and self._load(h) < h.lease.sessions
        ]
        return min(open_hosts, key=lambda h: self._load(h) / h.lease.sessions, default=None)

    # -- the base pool's hooks --------------------------------------------------------------------

    def _free(self, hardened: bool) -> PooledBrowser | None:
        host = self._placement(hardened)
        if host is None:
            return None
        for slot in self._slots:
            if (
                self._host_of.get(slot.browser) is host
                and not slot.retiring
                and slot.hardened == hardened
                and slot.served < self.config.recycle_after
            ):
                return slot
        return None

    async def _acquire(self, *, hardened: bool = False) -> PooledBrowser:
        """A connection with room for one more session, on the least loaded healthy host; waits for
        room (a session ending, a host back) until ``open_timeout_s``."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.config.open_timeout_s
            while True:
                slot = self._free(hardened)
                if slot is None:
                    host = self._placement(hardened) or await self._lease_more()
                    if host is not None:
                        self._target = host
                        try:
                            slot = await self._launch(hardened=hardened)
                        except BrowserError as exc:
                            self._refuse(host, str(exc), hardened)
                            if loop.time() < deadline:  # another host (a provider lending dead ones: bounded)
                                continue
                            raise BrowserTimeoutError(f"{self._no_room(hardened)}; last: {exc}") from None
                if slot is not None:
                    slot.active += 1
                    slot.served += 1
                    return slot
                left = deadline - loop.time()
                if left <= 0:
                    raise BrowserTimeoutError(self._no_room(hardened))
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(left, self.config.probe_interval_s)):
                        await self._room.wait()

    async def _open(self, playwright: Playwright, hardened: bool) -> Browser:
        host = self._target
        assert host is not None
        self._start_prober()
        browser = await connect_lease(playwright, self.config, host.lease, hardened=hardened)
        if hardened:
            refusal = await hardening_refusal(browser, self.config)
            if refusal is not None:
                host.unguardable = refusal
                self._close_soon(browser)
                raise _Unguardable(f"browser host {host.lease.name} cannot promise the navigation guard: {refusal}")
        self._host_of[browser] = host
        log.info("browser_host_connected", host=host.lease.name, hardened=hardened)
        return browser

    def _on_disconnected(self, slot: PooledBrowser) -> None:
        on_purpose = slot.dead
        super()._on_disconnected(slot)
        host = self._host_of.get(slot.browser)
        if host is not None and not on_purpose:
            host.crashes += 1
            host.lost += slot.active
            self._quarantine(host, "its browser connection was lost")
        self._host_of.pop(slot.browser, None)  # a connection gone is never handed out again

    async def _release(self, slot: PooledBrowser) -> None:
        await super()._release(slot)
        self._room.set()

    # -- hosts --------------------------------------------------------------------------------

    async def _lease_more(self) -> _Host | None:
        lease = await bounded(
            self.provider.acquire(timeout_s=self.config.open_timeout_s),
            self.provider,
            "acquire",
            self.config.open_timeout_s + 1,
        )
        if lease is None:
            return None
        if any(h.lease is lease for h in self._hosts):
            raise ProviderError(f"browser provider {self.provider.name} lent {lease.name} twice")
        host = _Host(lease)
        self._hosts.append(host)
        log.info("browser_host_leased", host=lease.name, sessions=lease.sessions)
        return host

    def _refuse(self, host: _Host, why: str, hardened: bool) -> None:
        """``host`` could not be connected to: unguardable for guarded sessions, else quarantined."""
        if hardened and host.unguardable:
            log.error("browser_host_unguardable", host=host.lease.name, why=host.unguardable)
            return
        self._quarantine(host, why)

    def _quarantine(self, host: _Host, why: str) -> None:
        """No session goes to ``host`` until a probe finds it answering; its connections are closed
        (their sessions fail now, not at their deadlines)."""
        if not host.quarantined:
            host.quarantined = True
            host.quarantines += 1
            log.warning("browser_host_quarantined", host=host.lease.name, why=why)
        lost = False
        for slot in self._slots:
            if self._host_of.get(slot.browser) is host and not slot.dead:
                slot.dead = True
                lost = lost or slot.active > 0
                host.lost += slot.active
                self._close_soon(slot.browser)
        if lost:
            host.crashes += 1
            self.crashes += 1  # its sessions' failures are a browser's crash: re-run elsewhere
        self._room.set()

    def _close_soon(self, browser: Browser) -> None:
        task = asyncio.get_running_loop().create_task(self._close(browser))
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    async def _close(self, browser: Browser) -> None:
        with contextlib.suppress(Exception):
            await within(browser.close(), self.config.probe_timeout_s, "browser.close")

    def _no_room(self, hardened: bool) -> str:
        hosts = ", ".join(
            f"{h.lease.name} ({'quarantined' if h.quarantined else 'unguardable' if hardened and h.unguardable else 'full'})"
            for h in self._hosts
        )
        return f"no browser host has room for a session within {self.config.open_timeout_s:g} s: {hosts or 'none lent'}"

    # -- health --------------------------------------------------------------------------------

    def _start_prober(self) -> None:
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe_forever())

    async def _probe_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.probe_interval_s)
            await self.probe()

    async def probe(self) -> None:
        """Ask every leased host whether it answers: quarantine those that do not, take back those
        quarantined that do."""
        hosts = list(self._hosts)
        answers = await asyncio.gather(*(self._answers(h) for h in hosts))
        for host, ok in zip(hosts, answers, strict=True):
            if not ok and not host.quarantined:
                self._quarantine(host, f"no answer to a probe within {self.config.probe_timeout_s:g} s")
            elif ok and host.quarantined:
                host.quarantined = False
                log.info("browser_host_back", host=host.lease.name)
                self._room.set()

    async def _answers(self, host: _Host) -> bool:
        timeout_s = self.config.probe_timeout_s
        try:
            return await bounded(
                self.provider.probe(host.lease, timeout_s=timeout_s), self.provider, "probe", timeout_s
            )
        except BrowserError as exc:
            log.warning("browser_host_probe_failed", host=host.lease.name, error=str(exc))
            return False

    # -- sessions, start, close ------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def session(
        self,
        *,
        guard: NavigationGuard | None = None,
        on_queue: Callable[[bool], None] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[BrowserSession]:
        async with super().session(guard=guard, on_queue=on_queue, options=options) as session:
            host = self._host_of.get(session.context.browser) if session.context.browser is not None else None
            if host is not None:
                host.sessions += 1
            token = session_host.set(host.lease.name if host is not None else "")
            try:
                yield session
            finally:
                with contextlib.suppress(ValueError):
                    session_host.reset(token)

    async def start(self, *, hardened: bool = False) -> None:
        """Lease the provider's hosts that are lendable now (a static list: all of them) and connect
        to each, so that a host that cannot promise the guard refuses the run up front (a
        ConfigError naming it) and one that is down is quarantined before the first session."""
        first = True
        while first or self.provider.eager:
            host = await self._lease_more()
            if host is None:
                break
            first = False
            self._target = host
            async with self._lock:
                try:
                    slot = await self._launch(hardened=hardened)
                except _Unguardable as exc:
                    raise ConfigError(f"{exc}; or run without a navigation guard on it") from None
                except BrowserError as exc:
                    self._quarantine(host, str(exc))
                    continue
            slot.active += 1
            await self._release(slot)
        if not any(not h.quarantined for h in self._hosts):
            raise BrowserError(self._no_room(hardened))

    async def aclose(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._prober
        for slot in list(self._slots):
            slot.dead = True
            with contextlib.suppress(Exception):
                await within(slot.browser.close(), self.config.open_timeout_s, "browser.close")
        self._slots.clear()
        for task in list(self._closers):
            with contextlib.suppress(Exception):
                await task
        timeout_s = self.config.open_timeout_s
        for host in self._hosts:
            with contextlib.suppress(BrowserError):
                await bounded(
                    self.provider.release(host.lease, timeout_s=timeout_s), self.provider, "release", timeout_s
                )
        with contextlib.suppress(BrowserError):
            await bounded(self.provider.aclose(timeout_s=timeout_s), self.provider, "aclose", timeout_s)
        await super().aclose()


class _Unguardable(BrowserError):
    """The host was reached but cannot promise the navigation guard's hardening."""
