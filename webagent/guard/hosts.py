"""Hosts as the browser reads them: one canonical form for allow-lists, block-lists and SSRF checks.

Chromium parses a URL's host the WHATWG way: percent-decoded, mapped and converted to ASCII by
UTS #46 (non-transitional: ``faß.test`` is ``xn--fa-hia.test``, not ``fass.test``), then read as
an IPv4 address when it ends in a number (``127.1``, ``0x7f.0.0.1``, ``2130706433``, fullwidth
digits). :func:`canonical_host` does the same with the ``idna`` package's UTS #46 mapping table,
and then names each address by where a connection to it goes:

* an IPv6 address that carries an IPv4 one -- IPv4-mapped ``::ffff:a.b.c.d``, IPv4-translated
  ``::ffff:0:a.b.c.d``, IPv4-compatible ``::a.b.c.d`` and NAT64 ``64:ff9b::a.b.c.d`` -- is that
  IPv4 address (``[::ffff:127.0.0.1]`` is ``127.0.0.1``, ``[64:ff9b::a9fe:a9fe]`` is
  ``169.254.169.254``);
* ``0.0.0.0`` (and ``[::]``) reach this machine's loopback: they are ``127.0.0.1`` (and ``::1``).

Hosts the browser would refuse to parse are None here, and a policy refuses them.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from urllib.parse import unquote, urlsplit

import idna

__all__ = [
    "URL_STRIP",
    "WEB_SCHEMES",
    "IPAddress",
    "canonical_host",
    "ip_of",
    "is_private_host",
    "is_private_ip",
    "url_host",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

WEB_SCHEMES = {"http": 80, "https": 443, "ws": 80, "wss": 443}
#: C0 controls and space, stripped at both ends of a URL (WHATWG).
URL_STRIP = "".join(chr(c) for c in range(0x21))
_FORBIDDEN = re.compile(r"[\x00-\x20%/\\?#@\[\]<>^|:\x7f]")
_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".home.arpa", ".lan")
_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_ANY4 = ipaddress.IPv4Address("0.0.0.0")
_ANY6 = ipaddress.IPv6Address("::")


def ip_of(host: str) -> IPAddress | None:
    """The address ``host`` spells exactly (``1.2.3.4``, ``::1``; no brackets), else None."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _unwrap(ip: IPAddress) -> IPAddress:
    """The address a connection to ``ip`` reaches (see the module docstring)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64 or ip in _TRANSLATED or (ip in _COMPATIBLE and int(ip) > 1):
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip == _ANY4:
        return ipaddress.IPv4Address("127.0.0.1")
    if ip == _ANY6:
        return ipaddress.IPv6Address("::1")
    return ip


def _whatwg_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The WHATWG IPv4 parser: ``127.1``, ``0x7f.0.0.1``, ``2130706433``, ``017700000001``."""
    parts = host.split(".")
    if parts and parts[-1] == "":
        parts.pop()
    if not parts or len(parts) > 4:
        return None
    numbers: list[int] = []
    for part in parts:
        if not part:
            return None
        try:
            if part[:2] == "0x":
                numbers.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part[0] == "0":
                numbers.append(int(part[1:], 8))
            else:
                numbers.append(int(part, 10))
        except ValueError:
            return None
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        return None
    value = numbers[-1]
    for i, n in enumerate(numbers[:-1]):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _ends_in_number(host: str) -> bool:
    last = host.rstrip(".").rsplit(".", 1)[-1]
    return bool(last) and (last.isdigit() or (last[:2] == "0x" and all(c in "0123456789abcdef" for c in last[2:])))


def _to_ascii(host: str) -> str | None:
    """UTS #46 ToASCII, non-transitional and without STD3 rules (as Chromium), or None."""
    if host.isascii():
        return host.lower()
    try:
        mapped = idna.uts46_remap(host, std3_rules=False, transitional=False)
    except idna.IDNAError:
        return None
    labels: list[str] = []
    for label in mapped.split("."):
        if label.isascii():
            labels.append(label)
            continue
        try:
            labels.append("xn--" + label.encode("punycode").decode("ascii"))
        except UnicodeError:
            return None
    return ".".join(labels)


@functools.lru_cache(maxsize=4096)  # pages ask for the same few hosts over and over
def canonical_host(host: str) -> str | None:
    """The canonical form of a URL's host (``[::1]``, a name, percent-encoded...), None if invalid.

    Names come out lower-case ASCII without a trailing dot, addresses as :mod:`ipaddress` writes
    them after :func:`_unwrap`: the form allow, block and private-network checks all compare.
    """
    text = host.strip()
    if text.startswith("[") or ":" in text:  # an IPv6 literal (only one has a colon); no zone id
        literal = text[1:-1] if text.startswith("[") and text.endswith("]") else text
        ip6 = ip_of(literal) if "%" not in literal else None
        return str(_unwrap(ip6)) if isinstance(ip6, ipaddress.IPv6Address) else None
    text = unquote(text)
    ascii_host = _to_ascii(text)
    if ascii_host is None:
        return None
    ascii_host = ascii_host.rstrip(".")
    if not ascii_host or _FORBIDDEN.search(ascii_host):
        return None
    if _ends_in_number(ascii_host):
        ip4 = _whatwg_ipv4(ascii_host)
        return None if ip4 is None else str(_unwrap(ip4))  # Chromium refuses a bad number too
    return ascii_host


def url_host(url: str) -> tuple[str, str, int] | None:
    """``(scheme, canonical host, port)`` of a web URL as the browser reads it; None if it has no valid host."""
    text = url.strip(URL_STRIP).replace("\t", "").replace("\n", "").replace("\r", "")
    scheme, colon, _ = text.partition(":")
    scheme = scheme.lower()
    if not colon or scheme not in WEB_SCHEMES:
        return None
    text = text.replace("\\", "/")  # special schemes treat '\' as '/'
    try:
        parts = urlsplit(text)
        raw = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if not raw:
        return None
    host = canonical_host(f"[{raw}]" if ":" in raw else raw)
    if host is None:
        return None
    return scheme, host, port if port is not None else WEB_SCHEMES[scheme]


def is_private_ip(ip: IPAddress) -> bool:
    """Whether an address (any spelling: mapped, NAT64, 6to4, Teredo...) is not a public one."""
    ip = _unwrap(ip)
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return is_private_ip(embedded)
    return not ip.is_global or ip.is_multicast


def is_private_host(host: str) -> bool:
    """Whether ``host`` (canonical: see :func:`canonical_host`) names a non-public address by itself."""
    ip = ip_of(host)
    if ip is None:
        return host in _LOCAL_NAMES or host.endswith(_LOCAL_SUFFIXES)
    return is_private_ip(ip)
