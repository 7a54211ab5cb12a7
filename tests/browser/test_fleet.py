"""The browser fleet: a provider plugin (a real entry point of a tiny distribution on sys.path) that
lends local Chromium processes on loopback ports; sessions placed by load, a host killed by PID
quarantined and its sessions failing at once, a host back used again, the guard's hardening asked
of each host, a provider that raises or hangs a clear error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from webagent.browser.devtools import free_port
from webagent.browser.guard import NavigationGuard
from webagent.browser.hardening import missing_flags
from webagent.browser.pool import BrowserPool
from webagent.browser.providers import FleetPool, make_pool
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.errors import BrowserError, ConfigError
from webagent.guard.navigation import NavigationPolicy
from webagent.guard.secrets import Secrets

from ..batch.test_runner import wait_for
from .fleetplugin import LoopbackChromiums, install_plugin

pytestmark = pytest.mark.browser


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[None]:
    with install_plugin(tmp_path / "site-packages"):
        yield


def fleet_config(**options: Any) -> BrowserConfig:
    return BrowserConfig(
        provider="plugin",
        plugin="loopback",
        plugin_options={"hosts": 2, "sessions": 3, **options},
        probe_interval_s=0.5,
        probe_timeout_s=2.0,
        navigation_timeout_s=10.0,
        command_timeout_s=10.0,
    )


async def fleet(config: BrowserConfig, stack: AsyncExitStack) -> FleetPool:
    pool = make_pool(config, Secrets())
    assert isinstance(pool, FleetPool)
    stack.push_async_callback(pool.aclose)
    return pool


def hosts_of(pool: FleetPool) -> LoopbackChromiums:
    assert isinstance(pool.provider, LoopbackChromiums)
    return pool.provider


async def open_sessions(pool: FleetPool, n: int, stack: AsyncExitStack, **kw: Any) -> list[BrowserSession]:
    return list(await asyncio.gather(*(stack.enter_async_context(pool.session(**kw)) for _ in range(n))))


async def test_sessions_spread_over_the_hosts_by_load(plugin: None) -> None:
    async with AsyncExitStack() as stack:
        pool = await fleet(fleet_config(), stack)
        await pool.start()
        await open_sessions(pool, 4, stack)
        figures = pool.host_figures()
        assert {name: f.sessions for name, f in figures.items()} == {"host-0": 2, "host-1": 2}
        await open_sessions(pool, 2, stack)  # 6 = both hosts full (3 each)
        assert {name: f.sessions for name, f in pool.host_figures().items()} == {"host-0": 3, "host-1": 3}


async def test_a_host_killed_is_quarantined_its_sessions_fail_and_it_is_used_again_when_back(plugin: None) -> None:
    async with AsyncExitStack() as stack:
        pool = await fleet(fleet_config(), stack)
        await pool.start()
        sessions = await open_sessions(pool, 2, stack)
        chromiums = hosts_of(pool)
        chromiums.kill("host-0")
        await wait_for(lambda: any(s.browser_crashed for s in sessions), 30, "a session told its browser died")
        lost = [s for s in sessions if s.browser_crashed]
        assert len(lost) == 1  # the one on host-0, told as a crash (a batch re-runs it elsewhere)
        figures = pool.host_figures()["host-0"]
        assert figures.quarantined and figures.crashes == 1 and figures.lost_sessions == 1
        assert pool.crashes == 1
        # While it is away, new sessions all go to host-1 (up to its 3).
        await open_sessions(pool, 2, stack)
        assert pool.host_figures()["host-0"].sessions == 1 and pool.host_figures()["host-1"].sessions == 3
        await pool.probe()
        assert pool.host_figures()["host-0"].quarantined  # still down: stays out
        await chromiums.start("host-0")  # back, on the same port
        await pool.probe()
        assert not pool.host_figures()["host-0"].quarantined
        (again,) = await open_sessions(pool, 1, stack)
        assert pool.host_figures()["host-0"].sessions == 2
        await again.goto("about:blank", start=True)


async def test_a_host_that_stops_answering_is_quarantined_by_the_probe(plugin: None) -> None:
    async with AsyncExitStack() as stack:
        pool = await fleet(fleet_config(), stack)
        await pool.start()
        await open_sessions(pool, 2, stack)
        chromiums = hosts_of(pool)
        chromiums.processes["host-1"].send_signal(19)  # SIGSTOP: its port answers nothing
        try:
            await pool.probe()
            assert pool.host_figures()["host-1"].quarantined
        finally:
            chromiums.processes["host-1"].send_signal(18)  # SIGCONT


async def test_guarded_sessions_need_hosts_that_show_the_hardening(plugin: None) -> None:
    async with AsyncExitStack() as stack:
        pool = await fleet(fleet_config(), stack)
        with pytest.raises(ConfigError) as info:
            await pool.start(hardened=True)
        message = str(info.value)
        assert "\n" not in message and "host-0 cannot promise the navigation guard" in message
        assert "--disable-shared-workers" in message
    async with AsyncExitStack() as stack:
        pool = await fleet(fleet_config(hardened=True), stack)
        await pool.start(hardened=True)
        guard = NavigationGuard(NavigationPolicy(block_private=True))
        assert guard.active
        (session,) = await open_sessions(pool, 1, stack, guard=guard)
        await session.goto("about:blank", start=True)


@pytest.mark.parametrize(
    ("fault", "said"), [("raise", "acquire failed: RuntimeError"), ("hang", "acquire gave no answer")]
)
async def test_a_provider_that_raises_or_hangs_is_a_clear_error(plugin: None, fault: str, said: str) -> None:
    config = fleet_config(fault=fault).model_copy(update={"navigation_timeout_s": 1.0, "command_timeout_s": 1.0})
    async with AsyncExitStack() as stack:
        pool = await fleet(config, stack)
        with pytest.raises(BrowserError) as info:
            await asyncio.wait_for(pool.start(), 30)
        assert f"browser provider loopback: {said}" in str(info.value) and "\n" not in str(info.value)
        assert info.value.infrastructure  # mid-batch, a task's re-run, never its verdict


def test_a_plugin_not_installed_is_a_one_line_config_error(plugin: None) -> None:
    with pytest.raises(ConfigError) as info:
        make_pool(BrowserConfig(provider="plugin", plugin="browserbase"), Secrets())
    message = str(info.value)
    assert "\n" not in message
    assert "'browserbase': no browser provider of that name is installed" in message
    assert "webagent.browser_providers" in message and "loopback" in message
    with pytest.raises(
        ConfigError, match=r"made a value of type object, not a webagent\.browser\.providers\.BrowserProvider"
    ):
        make_pool(BrowserConfig(provider="plugin", plugin="not-a-provider"), Secrets())


@pytest.mark.parametrize("hardened", [False, True])
async def test_a_single_cdp_endpoint_under_a_guard_must_show_the_hardening(hardened: bool) -> None:
    """Not only the fleet's hosts: ``cdp_endpoint`` too (today's one remote browser)."""
    chromiums = LoopbackChromiums({"hardened": hardened})
    try:
        await chromiums.start("one")
        config = BrowserConfig(cdp_endpoint=f"http://127.0.0.1:{chromiums.ports['one']}")
        pool = BrowserPool(config)
        try:
            await pool.start()  # unguarded sessions: no promise needed
            if hardened:
                await pool.start(hardened=True)
            else:
                with pytest.raises(ConfigError) as info:
                    await pool.start(hardened=True)
                assert "cannot promise the navigation guard: its Chromium was started without" in str(info.value)
                assert "\n" not in str(info.value)
        finally:
            await pool.aclose()
    finally:
        await chromiums.aclose(timeout_s=10)


def test_the_hardening_is_read_from_merged_list_flags() -> None:
    required = ["--disable-shared-workers", "--disable-blink-features=FedCm", "--x=a,b"]
    line = ["/usr/lib/chromium/chromium", "--disable-blink-features=Foo,FedCm", "--x=b", "--x=a"]
    assert missing_flags(required, line) == ["--disable-shared-workers"]
    assert missing_flags(required, [*line, "--disable-shared-workers"]) == []
    assert missing_flags(["--x=a,c"], line) == ["--x=a,c"]


async def test_a_dead_endpoint_lent_is_quarantined_and_the_sessions_go_elsewhere(plugin: None) -> None:
    async with AsyncExitStack() as stack:
        pool = await fleet(fleet_config(fault="dead"), stack)
        await pool.start()
        assert pool.host_figures()["host-0"].quarantined
        await open_sessions(pool, 3, stack)
        figures = pool.host_figures()
        assert figures["host-0"].sessions == 0 and figures["host-1"].sessions == 3


async def test_the_hosts_provider_sends_each_host_its_token_from_a_secret() -> None:
    """``[[browser.hosts]]`` end to end: a host behind a door that answers its CDP discovery only to
    the token read from the secret named by ``token_secret``; the other host takes no token."""
    token = "fleet-token-7d1f9a"
    seen: list[str] = []
    chromiums = LoopbackChromiums({})
    await chromiums.start("a")
    await chromiums.start("b")

    async def version(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != f"Bearer {token}":
            return web.Response(status=401, text="no token")
        async with (
            aiohttp.ClientSession() as client,
            client.get(f"http://127.0.0.1:{chromiums.ports['a']}/json/version") as reply,
        ):
            return web.json_response(await reply.json())

    app = web.Application()
    app.router.add_get("/json/version", version)
    app.router.add_get("/json/version/", version)
    runner = web.AppRunner(app)
    await runner.setup()
    door = free_port()
    await web.TCPSite(runner, "127.0.0.1", door).start()
    hosts = [
        {"url": f"http://127.0.0.1:{door}", "sessions": 2, "name": "door", "token_secret": "FLEET_TOKEN"},
        {"url": f"http://127.0.0.1:{chromiums.ports['b']}", "sessions": 2},
    ]
    config = BrowserConfig.model_validate({"provider": "hosts", "hosts": hosts})
    try:
        async with AsyncExitStack() as stack:
            pool = make_pool(config, Secrets({"FLEET_TOKEN": token}))
            assert isinstance(pool, FleetPool)
            stack.push_async_callback(pool.aclose)
            await pool.start()
            await open_sessions(pool, 4, stack)
            figures = pool.host_figures()
            assert {name: f.sessions for name, f in figures.items()} == {
                "door": 2,
                f"127.0.0.1:{chromiums.ports['b']}": 2,
            }
            assert not any(f.quarantined for f in figures.values())
            assert seen and set(seen) == {f"Bearer {token}"}
        with pytest.raises(BrowserError, match="no browser host has room"):  # without the token: refused
            async with AsyncExitStack() as stack:
                alone = BrowserConfig.model_validate(
                    {"provider": "hosts", "hosts": [{**hosts[0], "token_secret": None}]}
                )
                pool = make_pool(alone, Secrets())
                stack.push_async_callback(pool.aclose)
                await pool.start()
        assert "" in seen
    finally:
        await runner.cleanup()
        await chromiums.aclose(timeout_s=10)
