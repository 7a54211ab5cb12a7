"""One canonical host form: every spelling of an address or a name is judged as the one it reaches."""

from __future__ import annotations

import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from tests.strategies import PROPERTIES
from webagent.guard.hosts import canonical_host, is_private_host, url_host
from webagent.guard.navigation import NavigationPolicy

IPV4 = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)


def _spellings(ip: ipaddress.IPv4Address) -> list[str]:
    """Hosts Chromium reads as ``ip`` (WHATWG IPv4 forms) or connects to it through (IPv6 forms)."""
    value = int(ip)
    octets = [int(o) for o in str(ip).split(".")]
    forms = [
        str(ip),
        str(value),
        hex(value),
        ".".join(hex(o) for o in octets),
        ".".join(f"0{o:o}" for o in octets),
        f"{octets[0]}.{value & 0xFFFFFF}",
        f"{octets[0]}.{octets[1]}.{value & 0xFFFF}",
        str(ip).translate(str.maketrans("0123456789.", "０１２３４５６７８９．")),  # fullwidth
        f"[::ffff:{ip}]",
        f"[{ipaddress.IPv6Address(0xFFFF << 32 | value)}]",
        f"[::ffff:0:{ip}]",
        f"[64:ff9b::{ip}]",
        f"[{ipaddress.IPv6Address((0x64FF9B << 96) | value)}]",
    ]
    if value > 1:  # ::0.0.0.1 is ::1 itself
        forms.append(f"[::{ip}]")
    return forms


def _reached(ip: ipaddress.IPv4Address) -> str:
    return "127.0.0.1" if str(ip) == "0.0.0.0" else str(ip)


@PROPERTIES
@given(ip=IPV4, port=st.integers(1, 65535))
def test_every_spelling_of_an_address_is_that_address(ip: ipaddress.IPv4Address, port: int) -> None:
    policy = NavigationPolicy.build(blocked=[str(ip)], start_url="https://example.com/", private_network="allow")
    allowed = NavigationPolicy.build(allowed=[f"{ip}:{port}"], start_url="https://example.com/")
    private = is_private_host(_reached(ip))
    for host in _spellings(ip):
        url = f"http://{host}:{port}/path"
        assert url_host(url) == ("http", _reached(ip), port), url
        assert policy.check(url, navigation=False) is not None, url
        assert allowed.check(url, navigation=True) is None, url
        assert is_private_host(canonical_host(host) or "") == private, host


@PROPERTIES
@given(ip=IPV4, entry=st.sampled_from(["{ip}", "[::ffff:{ip}]", "[64:ff9b::{ip}]"]))
def test_entries_are_canonical_too(ip: ipaddress.IPv4Address, entry: str) -> None:
    policy = NavigationPolicy.build(blocked=[entry.format(ip=ip)], start_url="https://example.com/")
    assert [str(rule) for rule in policy.blocked] == [_reached(ip)]


NAME_CHARS = st.sampled_from(list("abcxyz019-_") + list("ßẞæøåéüÄÖ") + list("ａｚＡＺ０９") + ["\u3002", "\uff0e"])
LABELS = st.text(NAME_CHARS, min_size=1, max_size=8)
NAMES = st.lists(LABELS, min_size=1, max_size=3).map(".".join)


@PROPERTIES
@given(name=NAMES)
def test_a_name_and_its_canonical_form_are_one_host(name: str) -> None:
    canonical = canonical_host(name)
    if canonical is None:  # the policy refuses what it cannot read
        assert NavigationPolicy.build(blocked=["x.test"], start_url="https://e.com/").check(
            f"http://{name}/", navigation=True
        )
        return
    assert canonical.isascii() and canonical == canonical.lower()
    assert canonical_host(canonical) == canonical  # idempotent
    assert url_host(f"https://{name}/") == ("https", canonical, 443)
    assert url_host(f"https://{canonical.upper()}./") == ("https", canonical, 443)
