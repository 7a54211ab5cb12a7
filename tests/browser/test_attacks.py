"""The attack suite: every channel a page can open, against the agent's own pool, sessions and guard.

Each attack page (``webagent.testing.attacksites``) tries to reach a forbidden endpoint -- an
HTTP server, a TCP port, a UDP port that record all they receive -- from an allowed site, through
one channel (issue 23's table: CORS-mode redirects, workers, WebRTC, WebTransport, PaymentRequest,
FedCM, speculation rules, out-of-process frames, new tabs; a typed secret through some of them).
Every attack is run twice:

* unguarded (no policy, a plain browser): the forbidden endpoint must hear from it, so the attack
  works and the guarded run below can fail;
* guarded, through ``BrowserPool.session(guard=)`` and ``set_guard`` as a run has them, in
  every-request mode (an allow-list, a block list) and with ``private_network = "block"``, over
  the browser's direct DevTools connection ("devtools") and without one ("playwright": what an
  agent with secrets gets): the forbidden endpoints must hear nothing.

The names resolve through ``--host-resolver-rules`` (all to 127.0.0.1): ``shop.test`` looks public.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from webagent.browser.guard import NavigationGuard
from webagent.browser.pool import BrowserPool
from webagent.browser.secretpage import SecretPage
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.guard.navigation import NavigationPolicy
from webagent.guard.secrets import Secrets
from webagent.runtime import access as runtime_access
from webagent.testing.attacksites import (
    ALLOWED_HOST,
    FRAME_HOST,
    SECRET_BUTTON,
    SECRET_FIELD,
    AttackSites,
    Hit,
)

pytestmark = pytest.mark.browser

SECRET = "hunter2-Correct-Horse-77"
FORBIDDEN_NAMES = ["evil.test", f"evil.{ALLOWED_HOST}"]
GRACE_S = 1.0  # after an attack reports, for what it may still send
DONE_S = 60.0  # an attack page's report (generous: a loaded machine)

#: The modes of the guarded runs: the policy, and which forbidden endpoints the pages aim at.
MODES: dict[str, tuple[dict[str, object], str]] = {
    "allow": ({"allowed": [ALLOWED_HOST, FRAME_HOST]}, "host"),
    "private": ({"private_network": "block"}, "private"),
    "block": ({"blocked": FORBIDDEN_NAMES, "private_network": "allow"}, "host"),
}
#: The default: private addresses refused (the start URL looks public), only navigations judged.
AUTO: tuple[dict[str, object], str] = ({}, "private")
# Rows 1, 2 and 8 (every-request part): judged request by request.
REQUESTS = [
    "fetch-redirect",
    "fetch-redirect-post",
    "xhr-redirect",
    "eventsource-redirect",
    "script-redirect",
    "img-redirect",
    "sharedworker-fetch",
    "sharedworker-redirect",
    "sharedworker-websocket",
    "worker-websocket",
    "worker-redirect",
    "oopif-redirect",
    "oopif-fetch-redirect",
]
# Row 5: channels the Python checks never see. WebRTC over UDP aims at 127.0.0.1 (forbidden by
# the allow-list and private-network modes only); cross-site prefetch needs https: by name only.
CHANNELS = ["webrtc-turn-tcp", "webtransport", "payment-request", "fedcm"]
UDP_CHANNELS = ["webrtc-stun", "webrtc-turn-udp"]
CHANNELS_BY_NAME = ["speculation-prefetch"]


@pytest.fixture(scope="module")
def sites() -> Iterator[AttackSites]:
    with AttackSites() as served:
        yield served


class Pools:
    """The module's pools, made as they are first asked for and closed at its end."""

    def __init__(self, sites: AttackSites) -> None:
        self._sites = sites
        self._pools: dict[tuple[bool, bool, bool], BrowserPool] = {}

    def get(self, *, direct: bool, config_blocks: bool = False, unguarded: bool = False) -> BrowserPool:
        key = (direct, config_blocks, unguarded)
        if key not in self._pools:
            config = BrowserConfig(
                args=self._sites.browser_args(),
                direct_cdp=direct,
                settle_timeout_s=2.0,
                blocked_domains=FORBIDDEN_NAMES if config_blocks else [],
                # The unguarded runs on the binary guarded sessions get (the full Chromium: the
                # headless shell has no WebTransport, PaymentRequest or FedCM to attack with);
                # the guarded ones on the default, whichever binary the launcher picks for them.
                headless_shell=not unguarded,
            )
            self._pools[key] = BrowserPool(config)
        return self._pools[key]

    async def aclose(self) -> None:
        for pool in self._pools.values():
            await pool.aclose()


@pytest.fixture(scope="module")
async def pools(sites: AttackSites) -> AsyncIterator[Pools]:
    made = Pools(sites)
    yield made
    await made.aclose()


def _describe(hits: list[Hit]) -> list[str]:
    return [f"{h.channel} {h.what[:60]}" for h in hits]


async def _attack(
    pools: Pools,
    sites: AttackSites,
    attack: str,
    *,
    mode: str | None,
    direct: bool = True,
    config_blocks: bool = False,
    secret: str | None = None,
) -> tuple[str | None, list[str]]:
    """Run ``attack`` in a pooled session (unguarded when ``mode`` is None); its result and events."""
    policy_args, target = {**MODES, "auto": AUTO}[mode] if mode is not None else ({"private_network": "allow"}, "host")
    sites.clear()
    url = sites.url(attack, target=target, secret=secret is not None or attack == "popup-redirect")  # type: ignore[arg-type]
    guard = NavigationGuard(NavigationPolicy.build(start_url=url, **policy_args))
    pool = pools.get(direct=direct, config_blocks=config_blocks, unguarded=mode is None)
    async with pool.session(guard=guard) as session:
        await session.set_guard(guard)
        await session.goto(url, start=True)
        driver: BrowserSession | SecretPage = session
        if secret is not None:
            # The operator allows the secret on the attack page's own host; the attack is what the
            # page does with it afterwards.
            page_host = runtime_access.host_port(url)
            assert page_host is not None
            driver = SecretPage(session, Secrets({"PASSWORD": secret}), hosts=[page_host])
            await driver.write(*SECRET_FIELD, "{{PASSWORD}}", press_enter=False)
        if secret is not None or attack == "popup-redirect":
            await driver.click(*SECRET_BUTTON)
        result = await sites.wait_done(attack, DONE_S) if attack != "popup-redirect" else "clicked"
        events = driver.drain_events()
        if mode is not None:
            await asyncio.sleep(GRACE_S)  # anything still on its way would reach the endpoints
        else:
            assert await sites.wait_hit(DONE_S), f"{attack}: the unguarded attack reached nothing"
        return result, [*events, f"url={driver.url}"]


def _modes_for(channels: list[str], modes: list[str]) -> list[tuple[str, str, bool]]:
    return [(a, m, d) for a in channels for m in modes for d in (True, False)]


def _id(value: object) -> str:
    return {True: "devtools", False: "playwright"}.get(value, str(value)) if isinstance(value, bool) else str(value)


# -- the attacks work ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attack", [*REQUESTS, *CHANNELS, *UDP_CHANNELS, *CHANNELS_BY_NAME, "oopif-navigate", "popup-redirect"]
)
async def test_unguarded_the_attack_reaches_the_forbidden_host(pools: Pools, sites: AttackSites, attack: str) -> None:
    result, events = await _attack(pools, sites, attack, mode=None)
    assert sites.hits, (result, events)


@pytest.mark.parametrize(
    "attack", ["fetch-redirect-post", "sharedworker-redirect", "webrtc-turn-udp", "webrtc-turn-tcp"]
)
async def test_unguarded_a_typed_secret_reaches_the_forbidden_host(
    pools: Pools, sites: AttackSites, attack: str
) -> None:
    await _attack(pools, sites, attack, mode=None, secret=SECRET)
    assert await asyncio.to_thread(sites.wait, lambda: any(SECRET.encode() in h.data for h in sites.hits), DONE_S), (
        _describe(sites.hits)
    )


# -- guarded: nothing reaches it ---------------------------------------------------------------


@pytest.mark.parametrize(("attack", "mode", "direct"), _modes_for(REQUESTS, list(MODES)), ids=_id)
async def test_every_request_is_judged_whoever_makes_it(
    pools: Pools, sites: AttackSites, attack: str, mode: str, direct: bool
) -> None:
    result, events = await _attack(pools, sites, attack, mode=mode, direct=direct)
    assert result is not None, f"{attack}: the page never reported ({events})"
    assert sites.hits == [], (_describe(sites.hits), result, events)


@pytest.mark.parametrize(
    ("attack", "mode", "direct"),
    [
        *_modes_for(CHANNELS, ["allow", "private", "block"]),
        *_modes_for(UDP_CHANNELS, ["allow", "private"]),
        *_modes_for(CHANNELS_BY_NAME, ["allow", "block"]),
    ],
    ids=_id,
)
async def test_channels_the_checks_cannot_see_are_off(
    pools: Pools, sites: AttackSites, attack: str, mode: str, direct: bool
) -> None:
    # A block list reaches these channels through the browser's host resolver rules: it must be
    # the config's (browser.blocked_domains), as the pool launches its browsers with them.
    result, events = await _attack(pools, sites, attack, mode=mode, direct=direct, config_blocks=mode == "block")
    assert result is not None, f"{attack}: the page never reported ({events})"
    assert sites.hits == [], (_describe(sites.hits), result, events)


@pytest.mark.parametrize(("mode", "direct"), [(m, d) for m in ("allow", "private") for d in (True, False)], ids=_id)
@pytest.mark.parametrize(
    "attack", ["fetch-redirect-post", "sharedworker-redirect", "webrtc-turn-udp", "webrtc-turn-tcp"]
)
async def test_a_typed_secret_does_not_leave_for_a_forbidden_host(
    pools: Pools, sites: AttackSites, attack: str, mode: str, direct: bool
) -> None:
    result, events = await _attack(pools, sites, attack, mode=mode, direct=direct, secret=SECRET)
    assert result is not None, f"{attack}: the page never reported ({events})"
    assert sites.hits == [], _describe(sites.hits)
    assert not any(SECRET in e for e in events)  # what the policy is told is redacted


@pytest.mark.parametrize("direct", [True, False], ids=_id)
@pytest.mark.parametrize("mode", ["auto", *MODES])
async def test_an_out_of_process_frame_navigating_away_is_stopped_and_reported(
    pools: Pools, sites: AttackSites, mode: str, direct: bool
) -> None:
    if mode == "auto":
        policy = NavigationPolicy.build(start_url=sites.url("oopif-navigate"))
        assert policy.active and not policy.every_request
    result, events = await _attack(pools, sites, "oopif-navigate", mode=mode, direct=direct)
    assert result == "navigating", events
    assert sites.hits == [], _describe(sites.hits)
    assert any(e.startswith("Blocked a frame on the page from loading http://") for e in events), events


@pytest.mark.parametrize("direct", [True, False], ids=_id)
@pytest.mark.parametrize("mode", list(MODES))
async def test_a_new_tab_redirected_away_is_never_driven(
    pools: Pools, sites: AttackSites, mode: str, direct: bool
) -> None:
    _, events = await _attack(pools, sites, "popup-redirect", mode=mode, direct=direct)
    start = sites.url("popup-redirect", target=MODES[mode][1], secret=True)  # type: ignore[arg-type]
    assert events[-1] == f"url={start}", events  # the session stayed on its page
    assert not any("the agent switched to it" in e and "/popup" in e for e in events), events
    if direct:  # over the direct connection the tab is judged before its first request
        assert sites.hits == [], _describe(sites.hits)
        assert any(e.startswith("Blocked a new tab that was to open http://") for e in events), events


async def test_prerendering_is_off_while_the_agent_drives_the_browser(pools: Pools, sites: AttackSites) -> None:
    """Speculation-rules prerender: Chromium refuses it while a DevTools client that does not attach
    to tab targets (Playwright) is attached; the attack shows it, guarded or not."""
    guard = NavigationGuard(NavigationPolicy.build(start_url=sites.origin, private_network="allow"))
    async with pools.get(direct=True).session(guard=guard) as session:
        cdp = await session._state.cdp_session()
        statuses: list[str] = []
        cdp.on("Preload.prerenderStatusUpdated", lambda e: statuses.append(str(e.get("prerenderStatus", ""))))
        await cdp.send("Preload.enable")
        sites.clear()
        await session.goto(sites.url("speculation-prerender-redirect"), start=True)
        assert await sites.wait_done("speculation-prerender-redirect", DONE_S) is not None
        for _ in range(100):
            if statuses:
                break
            await asyncio.sleep(0.05)
        assert "PrerenderingDisabledByDevTools" in statuses, statuses
        assert sites.hits == []
