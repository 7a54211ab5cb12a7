"""Host matching against the real Chromium: what Chromium would request is what the policy judges.

Two proofs: Chromium's own URL parser (``new URL(u).hostname``) and webagent's agree on every
host they both read (generated names: UTS #46 mappings, fullwidth digits and dots, IPv4 and
IPv6 spellings); and every spelling of 127.0.0.1 that Chromium actually connects to is refused by
``--block-domain 127.0.0.1``, in the pure policy and in a guarded browser session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from playwright.async_api import Browser, Page
from playwright.async_api import Error as PlaywrightError

from tests.guard.test_hosts import IPV4, NAMES, _spellings
from webagent.browser.guard import NavigationGuard
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.errors import WebAgentError
from webagent.guard.hosts import canonical_host, url_host
from webagent.guard.navigation import NavigationPolicy
from webagent.testing.sites import SiteServer

pytestmark = pytest.mark.browser

#: Spellings of 127.0.0.1 (and 0.0.0.0, which reaches it): some Chromium connects to here, some
#: only through a NAT64 gateway or not at all; a policy must refuse every one a request can use.
LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "2130706433",
    "0x7f.1",
    "０x７f.１",
    "0.0.0.0",
    "[::ffff:127.0.0.1]",
    "[::ffff:0.0.0.0]",
    "[::ffff:0:7f00:1]",
    "[::127.0.0.1]",
    "[64:ff9b::127.0.0.1]",
]

HOSTS = st.one_of(NAMES, IPV4.flatmap(lambda ip: st.sampled_from(_spellings(ip))))


@pytest.fixture(scope="module")
async def parser_page(browser: Browser) -> AsyncIterator[Page]:
    page = await browser.new_page()
    yield page
    await page.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hosts=st.lists(HOSTS, min_size=10, max_size=40))
async def test_chromium_and_the_policy_read_hosts_alike(parser_page: Page, hosts: list[str]) -> None:
    urls = [f"http://{host}/" for host in hosts]
    read = await asyncio.wait_for(
        parser_page.evaluate(
            "us => us.map(u => { try { return new URL(u).hostname } catch (e) { return null } })", urls
        ),
        timeout=30,
    )
    refusing = NavigationPolicy.build(blocked=["blocked.test"], start_url="https://example.com/")
    for url, chromium in zip(urls, read, strict=True):
        ours = url_host(url)
        if chromium is None:
            continue  # Chromium requests nothing for it: whatever the policy says is moot
        if ours is None:  # a host only dots make up, say: refused, never judged as another one
            assert refusing.check(url, navigation=False) == "the address has no valid host", url
            continue
        assert ours[1] == canonical_host(chromium), (url, chromium)


async def test_every_spelling_chromium_connects_through_is_blocked(browser: Browser, site: SiteServer) -> None:
    # Unguarded: which spellings reach the server on 127.0.0.1 at all (on this machine).
    context = await browser.new_context()
    page = await context.new_page()
    reached: list[str] = []
    try:
        for i, host in enumerate(LOOPBACK_SPELLINGS):
            url = f"http://{host}:{site.port}/safety/target?via=spelling{i}"
            site.safety_hits.clear()
            with contextlib.suppress(PlaywrightError):  # unreachable here (no NAT64 gateway): still judged below
                await page.goto(url, timeout=10_000)
            if any(path.endswith(f"via=spelling{i}") for _, path in list(site.safety_hits)):
                reached.append(host)
    finally:
        await context.close()
    assert {"127.0.0.1", "0.0.0.0", "[::ffff:127.0.0.1]"} <= set(reached), reached

    policy = NavigationPolicy.build(blocked=["127.0.0.1"], start_url=f"http://localhost:{site.port}/")
    for host in LOOPBACK_SPELLINGS:
        url = f"http://{host}:{site.port}/"
        assert "blocked_domains entry 127.0.0.1" in (policy.check(url, navigation=True) or ""), host
        assert policy.check(url, navigation=False) is not None, host

    # Guarded: neither the agent's goto nor the page itself gets a request through.
    guard = NavigationGuard(policy)
    session = await BrowserSession.create(browser, BrowserConfig(settle_timeout_s=3.0), guard=guard)
    try:
        await session.set_guard(guard)
        start = f"http://localhost:{site.port}/safety/"
        await session.goto(start, start=True)
        site.safety_hits.clear()
        for i, host in enumerate(reached):
            url = f"http://{host}:{site.port}/safety/target?via=guarded{i}"
            with pytest.raises(WebAgentError, match=r"127\.0\.0\.1"):
                await session.goto(url)
            await session.page.evaluate(f"location.href = {json.dumps(url)}")
            await session.settle()
        await asyncio.sleep(0.3)  # anything late would still reach the server
        assert [hit for hit in site.safety_hits if "via=guarded" in hit[1]] == []
        assert session.url == start
    finally:
        await session.close()
