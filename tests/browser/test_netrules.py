"""The policy in Chromium's own terms (``webagent.browser.netrules``, the launcher's flags): never
wider than ``NavigationPolicy.check``, which stays the one rule."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from webagent.browser.launcher import HARDENED_ARGS, browser_args
from webagent.browser.netrules import (
    LOCAL_NAME_PATTERNS,
    PUBLIC_NETWORKS,
    proxy_net,
    resolver_rules,
    websocket_conditions,
)
from webagent.guard.navigation import NavigationPolicy, is_private_host, parse_rules

SSRF = NavigationPolicy.build(start_url="https://shop.example/")


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return any(ip in net for net in PUBLIC_NETWORKS if net.version == ip.version)


def _edges() -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The first and last address of every block, and their neighbours: where ranges go wrong."""
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for net in PUBLIC_NETWORKS:
        for ip in (net.network_address, net.broadcast_address):
            found += [ip]
            if int(ip) > 0:
                found.append(ip - 1)
            if int(ip) < (2**32 if ip.version == 4 else 2**128) - 1:
                found.append(ip + 1)
    return found


def test_the_proxy_net_lets_no_private_address_through() -> None:
    # At every edge of the public blocks: what goes direct is public for the policy too.
    leaks = [str(ip) for ip in _edges() if _public(ip) and is_private_host(str(ip))]
    assert leaks == []


@given(st.ip_addresses())
def test_no_address_the_net_lets_through_is_private(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    if _public(ip):
        assert not is_private_host(str(ip))


def test_the_private_network_net_lets_names_and_public_addresses_through() -> None:
    net = proxy_net(SSRF)
    assert net is not None and net["server"].startswith("http://127.0.0.1:")
    bypass = net["bypass"].split(",")
    assert bypass[-1] == "<-loopback>"  # evaluated first (Chromium reads the list from the end)
    networks = [ipaddress.ip_network(b) for b in bypass if "/" in b]
    assert any(ipaddress.ip_address("8.8.8.8") in n for n in networks)
    assert not any(ipaddress.ip_address(a) in n for n in networks for a in ("10.1.2.3", "169.254.169.254", "::1"))
    assert [b for b in bypass if b.startswith("*.")] == [f"*.{c}*" for c in "abcdefghijklmnopqrstuvwxyz"]


def test_the_allow_list_net_lets_only_the_allowed_hosts_through() -> None:
    policy = NavigationPolicy.build(
        start_url="https://shop.example/", allowed=["shop.example", "*.cdn.example", "[::1]:8080"]
    )
    net = proxy_net(policy)
    assert net is not None
    assert net["bypass"].split(",") == [
        "<-loopback>",
        "shop.example",
        "cdn.example",
        "*.cdn.example",
        "[::1]:8080",
        "[::]:8080",
    ]
    # An IPv4 entry also passes its IPv4-mapped spelling, which the policy judges as the same host.
    mapped = proxy_net(NavigationPolicy.build(start_url="http://[::ffff:127.0.0.1]:8000/", allowed=["127.0.0.1:8000"]))
    assert mapped is not None
    assert mapped["bypass"].split(",") == ["<-loopback>", "127.0.0.1:8000", "[::ffff:127.0.0.1]:8000", "0.0.0.0:8000"]


def test_local_hosts_pass_the_nets_only_where_private_networks_are_refused() -> None:
    policy = NavigationPolicy.build(
        start_url="http://localhost:8000/", trust_start=False, local_hosts=["127.0.0.1:8000", "localhost:8000"]
    )
    net = proxy_net(policy)
    assert net is not None
    bypass = net["bypass"].split(",")
    assert bypass[-4:] == ["127.0.0.1:8000", "[::ffff:127.0.0.1]:8000", "0.0.0.0:8000", "localhost:8000"]
    assert bypass.index("<-loopback>") < bypass.index("127.0.0.1:8000")  # evaluated before loopback's refusal
    sockets = websocket_conditions(policy)
    assert sockets[0] == {"urlPattern": "ws{s}?://127.0.0.1:8000/*", **_pass(sockets[0])}
    assert not sockets[1].get("offline") and sockets[1]["urlPattern"] == "ws{s}?://localhost:8000/*"
    assert all(r.get("offline") for r in sockets[2:])
    # Under an allow-list only the allowed entries pass.
    listed = NavigationPolicy.build(
        start_url="https://x.example/", allowed=["x.example"], local_hosts=["127.0.0.1:8000"]
    )
    listed_net = proxy_net(listed)
    assert listed_net is not None and "127.0.0.1:8000" not in listed_net["bypass"].split(",")


def _pass(rule: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in rule.items() if k != "urlPattern"}


def test_no_net_where_there_is_nothing_to_refuse_or_only_a_block_list() -> None:
    assert proxy_net(NavigationPolicy.build(start_url="http://127.0.0.1:8000/")) is None
    assert proxy_net(NavigationPolicy.build(start_url="http://127.0.0.1/", blocked=["evil.example"])) is None


def test_websocket_rules_follow_the_policy_order() -> None:
    policy = NavigationPolicy.build(
        start_url="https://x.example/", allowed=["*.ok.example"], blocked=["bad.ok.example"]
    )
    rules = websocket_conditions(policy)
    assert [(r["urlPattern"], r.get("offline", False)) for r in rules] == [
        ("ws{s}?://bad.ok.example:*/*", True),  # a blocked entry wins over an allowed one
        ("ws{s}?://{*.}?ok.example:*/*", False),
        ("ws{s}?://*:*/*", True),  # everything else, under an allow-list
    ]
    private = websocket_conditions(SSRF)
    assert [r["urlPattern"] for r in private] == [
        f"ws{{s}}?://{n.replace('*.', '{*.}?', 1)}:*/*" for n in LOCAL_NAME_PATTERNS
    ]
    assert all(is_private_host(n.replace("*.", "x.")) for n in LOCAL_NAME_PATTERNS)
    assert websocket_conditions(NavigationPolicy.build(start_url="http://127.0.0.1/")) == []


def test_resolver_rules_refuse_blocked_names_only() -> None:
    blocked = parse_rules(["evil.example", "*.tracker.example", "10.0.0.5", "[::1]", "ports.example:8080"])
    assert resolver_rules(blocked) == [
        "MAP evil.example ~NOTFOUND",
        "MAP tracker.example ~NOTFOUND",
        "MAP *.tracker.example ~NOTFOUND",
    ]


def test_hardened_browsers_get_the_switches_and_keep_the_callers_flags() -> None:
    args = browser_args(
        ["--disable-features=Mine", "--host-resolver-rules=MAP *.test 127.0.0.1", "--disable-blink-features=Other"],
        hardened=True,
        blocked=["evil.test"],
    )
    assert all(flag in args for flag in HARDENED_ARGS[:2])
    flags = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if "=" in a}
    assert "Mine" in flags["--disable-features"] and "HttpsUpgrades" in flags["--disable-features"]  # merged
    assert flags["--disable-blink-features"] == "FedCm,Other"
    # webagent's rule first: Chromium applies the first rule that matches
    assert flags["--host-resolver-rules"] == "MAP evil.test ~NOTFOUND,MAP *.test 127.0.0.1"
    assert len([a for a in args if a.startswith("--disable-features")]) == 1
    assert not any(flag in browser_args([]) for flag in HARDENED_ARGS)
