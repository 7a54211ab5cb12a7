"""What Chromium's network layer refuses by itself, derived from a ``NavigationPolicy`` (pure).

The navigation guard checks every HTTP(S) request a page makes in Python (``Fetch``, see
``webagent.browser.guard``). Two channels never reach that interception, so the policy is also
handed to Chromium in two declarative forms, with no Python per request:

* **WebSocket rules** (``websocket_conditions``): DevTools network conditions by URL pattern
  (``Network.emulateNetworkConditionsByRule``), "offline" for WebSocket URLs the policy refuses
  by name: blocked hosts, every host but the allowed ones under an allow-list, local names
  (``localhost``, ``*.local``, ``*.internal``, ...) when private networks are refused. They hold
  for the WebSockets of a page, its frames and its dedicated workers. URL patterns cannot express
  address ranges: private IP literals are left to the proxy net below.
* **The proxy net** (``proxy_net``): a context whose policy has an allow-list, or refuses private
  networks, gets a proxy that does not exist, with every destination the policy allows *bypassing*
  it. Whatever the channel (HTTP, WebSocket, WebTransport, WebRTC over TCP, payment manifests,
  FedCM, prefetch), a connection the bypass list does not name goes to the dead proxy and fails.
  Allow-list: the allowed hosts bypass it. Private networks refused (no allow-list): public IP
  literals and host names bypass it, private IP literals and loopback names do not. A block list
  cannot be expressed (bypass rules only say what goes direct): it is left to the checks in Python
  and the WebSocket rules.

A block list has one more form, for the browsers launched for guarded sessions: host resolver
rules (``resolver_rules``) under which the blocked *names* of ``browser.blocked_domains`` do not
resolve, whatever asks (an entry with a port, or an IP literal, cannot be said this way).

All are a net under the Python checks, never wider than the policy: the tests hold each of them
against ``NavigationPolicy.check`` (``tests/browser/test_netrules.py``).
"""

from __future__ import annotations

import ipaddress
import socket
import string
from typing import Any

from ..guard.navigation import HostRule, NavigationPolicy

__all__ = [
    "LOCAL_NAME_PATTERNS",
    "PUBLIC_NETWORKS",
    "dead_proxy",
    "proxy_net",
    "resolver_rules",
    "websocket_conditions",
]

#: Host names that name this machine or a private network whatever DNS says (``safety.is_private_host``).
LOCAL_NAME_PATTERNS = (
    "localhost",
    "localhost.localdomain",
    "ip6-localhost",
    "ip6-loopback",
    "*.localhost",
    "*.local",
    "*.internal",
    "*.home.arpa",
    "*.lan",
)

# Every address the IANA special-purpose registries (and Python's ``is_global``) do not call
# global, and multicast: what ``private_network`` refuses, over-approximated to whole blocks.
_NOT_PUBLIC_V4 = (
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/3",  # multicast, reserved, broadcast
)
# IPv6 outside 2000::/3 is never public; inside it, the special blocks and 6to4 (which embeds an
# IPv4 address that may be private) are left out.
_NOT_PUBLIC_V6_IN_GLOBAL = ("2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20")


def _public_networks() -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    v4: list[ipaddress.IPv4Network] = [ipaddress.IPv4Network("0.0.0.0/0")]
    for text in _NOT_PUBLIC_V4:
        hole = ipaddress.IPv4Network(text)
        v4 = [part for net in v4 for part in ((net,) if not net.overlaps(hole) else net.address_exclude(hole))]
    v6: list[ipaddress.IPv6Network] = [ipaddress.IPv6Network("2000::/3")]
    for text in _NOT_PUBLIC_V6_IN_GLOBAL:
        hole6 = ipaddress.IPv6Network(text)
        v6 = [part for net in v6 for part in ((net,) if not net.overlaps(hole6) else net.address_exclude(hole6))]
    return (*ipaddress.collapse_addresses(v4), *ipaddress.collapse_addresses(v6))


#: The IP networks the proxy net lets through when private networks are refused.
PUBLIC_NETWORKS = _public_networks()

_NOOP = {"latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
_OFFLINE = {**_NOOP, "offline": True}


def _url_host(host: str) -> str:
    return f"\\[{host}\\]" if ":" in host else host


def _socket_patterns(rule: HostRule) -> list[str]:
    port = str(rule.port) if rule.port is not None else "*"
    host = ("{*.}?" if rule.wildcard else "") + _url_host(rule.host)
    return [f"ws{{s}}?://{host}:{port}/*"]


def websocket_conditions(policy: NavigationPolicy) -> list[dict[str, Any]]:
    """``matchedNetworkConditions`` for ``Network.emulateNetworkConditionsByRule`` (first match wins):
    blocked entries are offline, then allowed entries pass, then, under an allow-list, every other
    WebSocket is offline, and when private networks are refused, local names are. Empty when there
    is nothing to refuse."""
    blocked = [{"urlPattern": p, **_OFFLINE} for rule in policy.blocked for p in _socket_patterns(rule)]
    rest: list[dict[str, Any]] = []
    if policy.allowed:
        rest.append({"urlPattern": "ws{s}?://*:*/*", **_OFFLINE})
    elif policy.block_private:
        rest += [
            {"urlPattern": f"ws{{s}}?://{n.replace('*.', '{*.}?', 1)}:*/*", **_OFFLINE} for n in LOCAL_NAME_PATTERNS
        ]
    if not blocked and not rest:
        return []
    # A blocked entry wins over an allowed one, as in NavigationPolicy.check; an allowed entry
    # wins over the rest.
    passing = policy.allowed if policy.allowed else policy.local_hosts
    allowed = [{"urlPattern": p, **_NOOP} for rule in passing for p in _socket_patterns(rule)]
    return [*blocked, *allowed, *rest]


def _bypass_entries(rule: HostRule) -> list[str]:
    host = f"[{rule.host}]" if ":" in rule.host else rule.host
    port = f":{rule.port}" if rule.port is not None else ""
    # The policy judges [::ffff:a.b.c.d] as a.b.c.d, and 0.0.0.0 / [::] as loopback; Chromium's
    # bypass rules match spellings, so an entry lets the ones the policy allows through with it.
    if _is_ipv4(rule.host):
        entries = [host + port, f"[::ffff:{rule.host}]{port}"]
        return [*entries, f"0.0.0.0{port}"] if rule.host == "127.0.0.1" else entries
    if rule.host == "::1":
        return [host + port, f"[::]{port}"]
    return [host + port, f"*.{host}{port}"] if rule.wildcard else [host + port]


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


_dead: socket.socket | None = None


def dead_proxy() -> str:
    """A proxy address where nothing answers: a port this process holds without listening, so no
    other program can take it (connections to it are refused at once)."""
    global _dead
    if _dead is None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        _dead = sock
    return f"http://127.0.0.1:{_dead.getsockname()[1]}"


def proxy_net(policy: NavigationPolicy) -> dict[str, str] | None:
    """Playwright's ``proxy`` option for a context under ``policy`` (None: no net for this policy).

    Chromium evaluates bypass rules from last to first: ``<-loopback>`` (loopback is *not* let
    through) comes after the public ranges and before the explicitly allowed entries, so that an
    allowed ``127.0.0.1:8080`` still goes direct while any other loopback destination does not.
    """
    if not policy.active:
        return None
    explicit = [entry for rule in policy.allowed for entry in _bypass_entries(rule)]
    if policy.allowed:
        bypass = ["<-loopback>", *explicit]
    elif policy.block_private:
        # Host names whose last label starts with a letter (every top-level domain does; no IP
        # literal does): DNS names go direct, as the Python checks judge them by name.
        names = [f"*.{c}*" for c in string.ascii_lowercase]
        vouched = [entry for rule in policy.local_hosts for entry in _bypass_entries(rule)]
        bypass = [*map(str, PUBLIC_NETWORKS), *names, "<-loopback>", *explicit, *vouched]
    else:
        return None
    return {"server": dead_proxy(), "bypass": ",".join(bypass)}


def resolver_rules(blocked: tuple[HostRule, ...] | list[HostRule]) -> list[str]:
    """``--host-resolver-rules`` entries under which the blocked host names do not resolve (entries
    with a port and IP literals are left out: a rule maps a whole name)."""
    rules: list[str] = []
    for rule in blocked:
        if rule.port is not None or ":" in rule.host or rule.host.replace(".", "").isdigit():
            continue
        rules.append(f"MAP {rule.host} ~NOTFOUND")
        if rule.wildcard:
            rules.append(f"MAP *.{rule.host} ~NOTFOUND")
    return rules
