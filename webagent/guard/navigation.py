"""Navigation policy: which URLs the browser may open or request (pure; no browser here).

Entries of ``allowed_domains`` / ``blocked_domains`` are ``host``, ``host:port`` or
``*.example.com`` (that domain and every subdomain); IP literals (``10.0.0.5``, ``[::1]:8080``)
work too. URLs are judged on the host the *browser* would connect to: userinfo
(``https://allowed.com@evil.com``), backslashes, percent-encoded and numeric IPv4 hosts
(``http://2130706433/``), a trailing dot and upper case are normalised the way Chromium does.
Entries and URLs alike are brought to one canonical form (``hosts.canonical_host``): UTS #46
names (``faß.test`` is ``xn--fa-hia.test``), IPv6 spellings of an IPv4 address
(``[::ffff:127.0.0.1]``, NAT64 ``[64:ff9b::a9fe:a9fe]``) as that address, ``0.0.0.0`` as
``127.0.0.1``; so ``--block-domain 127.0.0.1`` blocks every spelling of it.

Schemes, once any rule is active:

* ``http``/``https``/``ws``/``wss``: judged by host (and port);
* ``about:blank`` / ``about:srcdoc``: allowed (empty documents);
* ``data:`` and ``blob:``: allowed as subresources (inline content, nothing leaves the machine),
  refused as navigations (a ``blob:`` navigation is judged by the origin inside it);
* ``file:``: allowed only when local access is (a local start URL or ``private_network =
  "allow"``) and no allow-list is set, or the start URL is itself a ``file:`` URL;
* ``javascript:``, ``filesystem:``, ``chrome:``, ``view-source:`` and anything else: refused.

Private, loopback, link-local and other non-global addresses (and names such as ``localhost``,
``*.local``, ``*.internal``) are refused when ``block_private`` is set -- by default whenever the
start URL is not itself local, or was chosen by someone other than the operator -- unless an
allowed entry names the host explicitly, or the host is one of the policy's ``local_hosts``: a
server the operator vouches for (a task set's own local server, the local start of a task file
that is not trusted), let through as that one ``host:port`` and nothing else local.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .hosts import URL_STRIP, WEB_SCHEMES, canonical_host, ip_of, is_private_host, is_private_ip, url_host

__all__ = [
    "HostRule",
    "NavigationPolicy",
    "PrivateNetwork",
    "is_local_url",
    "is_private_host",
    "parse_rule",
    "parse_rules",
    "url_host",
]

PrivateNetwork = Literal["auto", "allow", "block"]
Resolver = Callable[[str], Awaitable[list[str]]]

_EMPTY_DOCS = ("about:blank", "about:srcdoc")
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


@dataclass(frozen=True, slots=True)
class HostRule:
    """One allowed/blocked entry: a host (or ``*.domain``) and an optional port."""

    host: str
    port: int | None = None
    wildcard: bool = False

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            return host == self.host or host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return ("*." if self.wildcard else "") + host + (f":{self.port}" if self.port is not None else "")


def parse_rule(entry: str) -> HostRule:
    """Parse ``host``, ``host:port``, ``*.domain`` or an IP literal; ValueError says what is wrong."""
    text = entry.strip().lower()
    if not text:
        raise ValueError("an entry is empty")
    if "://" in text or "/" in text or "@" in text or "?" in text or "#" in text:
        raise ValueError(
            f"{entry!r} is not a host: write example.com, example.com:8080 or *.example.com (no scheme or path)"
        )
    wildcard = text.startswith("*.")
    if wildcard:
        text = text[2:]
    port: int | None = None
    port_text: str | None = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r}: an IPv6 address must look like [::1] or [::1]:8080")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host = text  # a name, or a bare IPv6 address
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"{entry!r}: the port must be a number between 1 and 65535")
        port = int(port_text)
    if "*" in host:
        raise ValueError(f"{entry!r}: a wildcard is only allowed as a leading '*.', e.g. *.example.com")
    canonical = canonical_host(f"[{host}]" if ":" in host else host)
    if canonical is not None and ip_of(canonical) is not None:
        if wildcard:
            raise ValueError(f"{entry!r}: a wildcard needs a domain name, not an IP address")
        return HostRule(canonical, port)
    if canonical is None or not all(_LABEL.match(label) for label in canonical.split(".")):
        raise ValueError(f"{entry!r} is not a valid host name")
    return HostRule(canonical, port, wildcard)


def parse_rules(entries: Iterable[str]) -> tuple[HostRule, ...]:
    return tuple(parse_rule(e) for e in entries)


def is_local_url(url: str) -> bool:
    """Whether a start URL points at this machine or a private network (by its text alone)."""
    text = url.strip().lower()
    if text.startswith("file:"):
        return True
    parsed = url_host(url)
    return parsed is not None and is_private_host(parsed[1])


async def _system_resolver(host: str) -> list[str]:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(3.0):
        infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


@dataclass(slots=True)
class NavigationPolicy:
    """Decides whether a URL may be opened (``navigation``) or requested by a page."""

    allowed: tuple[HostRule, ...] = ()
    blocked: tuple[HostRule, ...] = ()
    #: Private hosts let through although private addresses are refused (each ``host:port``); not
    #: an allow-list: under ``allowed`` they must be allowed too.
    local_hosts: tuple[HostRule, ...] = ()
    block_private: bool = False
    allow_file: bool = True
    #: Check every request (subresources too), not only navigations: lists or private_network="block".
    every_request: bool = True
    resolver: Resolver = _system_resolver
    _resolved: dict[str, bool] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        *,
        allowed: Sequence[str] = (),
        blocked: Sequence[str] = (),
        private_network: PrivateNetwork = "auto",
        start_url: str = "",
        resolver: Resolver | None = None,
        trust_start: bool = True,
        local_hosts: Sequence[str] = (),
    ) -> NavigationPolicy:
        """The policy of one run. ``private_network="auto"`` blocks private addresses unless the start URL is local.

        ``trust_start=False`` for a start URL that someone else chose (an MCP or environment
        client, a task file): it proves nothing, so a local one neither opens private networks in
        ``auto`` mode nor allows ``file:`` URLs (only ``private_network="allow"`` or an allowed
        entry naming a host does). ``local_hosts``: ``host:port`` entries of private servers the
        operator vouches for, let through however private networks are ruled (a blocked entry
        still wins, and an allow-list still applies).
        """
        local_start = trust_start and bool(start_url) and is_local_url(start_url)
        local_ok = private_network == "allow" or (private_network == "auto" and local_start)
        allowed_rules, blocked_rules = parse_rules(allowed), parse_rules(blocked)
        file_start = start_url.strip().lower().startswith("file:")
        allow_file = trust_start and (file_start or (local_ok and not allowed_rules))
        local_rules = parse_rules(local_hosts)
        for rule in local_rules:
            if rule.port is None or rule.wildcard:
                raise ValueError(f"a local host is one host:port, not {str(rule)!r}")
        return cls(
            allowed=allowed_rules,
            blocked=blocked_rules,
            local_hosts=local_rules,
            block_private=not local_ok,
            allow_file=allow_file,
            every_request=bool(allowed_rules or blocked_rules or private_network == "block"),
            resolver=resolver or _system_resolver,
        )

    @property
    def active(self) -> bool:
        """Whether anything is ever refused (if not, the browser needs no request interception)."""
        return bool(self.allowed or self.blocked or self.block_private or not self.allow_file)

    def describe(self) -> str:
        """One line for the policy prompt and logs."""
        parts: list[str] = []
        if self.allowed:
            parts.append("only these hosts may be visited: " + ", ".join(map(str, self.allowed)))
        if self.blocked:
            parts.append("these hosts are blocked: " + ", ".join(map(str, self.blocked)))
        if self.block_private:
            parts.append("private and local network addresses are blocked")
        return "; ".join(parts)

    def check(self, url: str, *, navigation: bool) -> str | None:
        """Why ``url`` must not be opened (``navigation``) or requested; None when it may."""
        if not self.active:
            return None
        text = url.strip(URL_STRIP)
        scheme = text.partition(":")[0].lower() if ":" in text else ""
        if scheme in WEB_SCHEMES:
            parsed = url_host(text)
            if parsed is None:
                return "the address has no valid host"
            return self._check_host(parsed[1], parsed[2])
        if scheme == "about":
            base = text.lower().split("#", 1)[0].split("?", 1)[0]
            return None if base in _EMPTY_DOCS else "internal about: pages are not allowed"
        if scheme == "data":
            return "data: URLs may not be opened as pages" if navigation else None
        if scheme == "blob":
            if not navigation:
                return None
            inner = text[5:]
            return (
                self.check(inner, navigation=True)
                if inner.lower().startswith(("http:", "https:"))
                else ("blob: URLs of this origin may not be opened as pages")
            )
        if scheme == "file":
            return None if self.allow_file else "local files may not be opened"
        if scheme == "javascript":
            return "javascript: URLs may not be opened"
        return f"{scheme or 'this'}: URLs may not be opened" if scheme else "the address is not a valid URL"

    def _check_host(self, host: str, port: int) -> str | None:
        for rule in self.blocked:
            if rule.matches(host, port):
                return f"{host} is blocked (blocked_domains entry {rule})"
        explicit = any(rule.matches(host, port) for rule in self.allowed)
        if self.allowed and not explicit:
            return f"{host} is not in allowed_domains"
        vouched = explicit or any(rule.matches(host, port) for rule in self.local_hosts)
        if self.block_private and not vouched and is_private_host(host):
            return f"{host} is a private or local network address"
        return None

    async def check_resolved(self, url: str, *, navigation: bool) -> str | None:
        """``check`` plus, for navigations when private addresses are blocked, the host's DNS answer.

        A name that resolves to a private address is refused (cached per policy). The browser
        resolves the name again when it connects, so a DNS server that changes its answer in
        between (rebinding) is not caught here.
        """
        reason = self.check(url, navigation=navigation)
        if reason is not None or not navigation or not self.block_private:
            return reason
        parsed = url_host(url)
        if parsed is None or ip_of(parsed[1]) is not None:
            return None
        host = parsed[1]
        if any(rule.matches(host, parsed[2]) for rule in (*self.allowed, *self.local_hosts)):
            return None
        private = self._resolved.get(host)
        if private is None:
            try:
                addresses = await self.resolver(host)
            except (OSError, TimeoutError, UnicodeError):
                addresses = []  # unresolvable: the browser fails to connect by itself
            private = any(is_private_ip(ip) for a in addresses if (ip := ip_of(a.split("%", 1)[0])) is not None)
            self._resolved[host] = private
        return f"{host} resolves to a private or local network address" if private else None
