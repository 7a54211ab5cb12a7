"""The navigation policy, without a browser: entries, URL parsing tricks, schemes, private addresses."""

from __future__ import annotations

import pytest

from webagent.config import load_config
from webagent.errors import ConfigError
from webagent.guard.navigation import HostRule, NavigationPolicy, is_local_url, is_private_host, parse_rule, url_host


@pytest.mark.parametrize(
    ("entry", "rule"),
    [
        ("example.com", HostRule("example.com")),
        ("  Example.COM. ", HostRule("example.com")),
        ("example.com:8080", HostRule("example.com", 8080)),
        ("*.example.com", HostRule("example.com", None, True)),
        ("*.example.com:443", HostRule("example.com", 443, True)),
        ("10.0.0.5", HostRule("10.0.0.5")),
        ("127.0.0.1:8000", HostRule("127.0.0.1", 8000)),
        ("[::1]", HostRule("::1")),
        ("[::1]:8080", HostRule("::1", 8080)),
        ("::1", HostRule("::1")),
        ("bücher.de", HostRule("xn--bcher-kva.de")),
        ("localhost", HostRule("localhost")),
    ],
)
def test_parse_rule(entry: str, rule: HostRule) -> None:
    assert parse_rule(entry) == rule


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("", "empty"),
        ("https://example.com", "no scheme or path"),
        ("example.com/path", "no scheme or path"),
        ("user@example.com", "no scheme or path"),
        ("example.com:0", "port must be"),
        ("example.com:http", "port must be"),
        ("example.com:70000", "port must be"),
        ("a.*.example.com", "only allowed as a leading"),
        ("*example.com", "only allowed as a leading"),
        ("*.10.0.0.1", "not an IP address"),
        ("exa mple.com", "not a valid host name"),
        ("-bad-.com", "not a valid host name"),
        ("[::1", "IPv6"),
    ],
)
def test_bad_entries(entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rule(entry)


def test_bad_entry_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides={"browser.allowed_domains": ["good.com", "https://bad.com/x"]})
    assert "browser.allowed_domains" in str(info.value) and "'https://bad.com/x'" in str(info.value)
    assert "\n" not in str(info.value)
    config = load_config(env={"WEBAGENT_BROWSER_BLOCKED_DOMAINS": "a.com, *.b.com"})
    assert config.browser.blocked_domains == ["a.com", "*.b.com"]


def test_rule_matching() -> None:
    wild = parse_rule("*.example.com")
    assert wild.matches("example.com", 443) and wild.matches("a.b.example.com", 80)
    assert not wild.matches("notexample.com", 443) and not wild.matches("example.com.evil.net", 443)
    exact = parse_rule("example.com:8080")
    assert exact.matches("example.com", 8080) and not exact.matches("example.com", 80)
    assert not exact.matches("www.example.com", 8080)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://Example.COM./x", ("https", "example.com", 443)),
        ("http://example.com:8080", ("http", "example.com", 8080)),
        ("wss://example.com/s", ("wss", "example.com", 443)),
        ("https://allowed.com@evil.com/", ("https", "evil.com", 443)),
        ("https://allowed.com:pw@evil.com/", ("https", "evil.com", 443)),
        ("https://evil.com\\@allowed.com/", ("https", "evil.com", 443)),
        ("https://evil.com\\.allowed.com/", ("https", "evil.com", 443)),
        ("https://ev%69l.com/", ("https", "evil.com", 443)),
        (" \thttps://evil.com/ ", ("https", "evil.com", 443)),
        ("ht\ttps://ev\nil.com/", ("https", "evil.com", 443)),
        ("http://2130706433/", ("http", "127.0.0.1", 80)),
        ("http://0x7f.1/", ("http", "127.0.0.1", 80)),
        ("http://0177.0.0.1/", ("http", "127.0.0.1", 80)),
        ("http://127.1/", ("http", "127.0.0.1", 80)),
        ("http://[::ffff:7f00:1]/", ("http", "127.0.0.1", 80)),
        ("http://[::ffff:127.0.0.1]/", ("http", "127.0.0.1", 80)),
        ("http://[::ffff:0:7f00:1]/", ("http", "127.0.0.1", 80)),
        ("http://[::127.0.0.1]/", ("http", "127.0.0.1", 80)),
        ("http://[64:ff9b::a9fe:a9fe]/", ("http", "169.254.169.254", 80)),
        ("http://0.0.0.0:8000/", ("http", "127.0.0.1", 8000)),
        ("http://[::]/", ("http", "::1", 80)),
        ("http://[::1]/", ("http", "::1", 80)),
        ("http://[fe80::1%25eth0]/", None),
        ("http://faß.test/", ("http", "xn--fa-hia.test", 80)),
        ("http://FAẞ.test/", ("http", "xn--fa-hia.test", 80)),
        ("http://１２７.０.０.１/", ("http", "127.0.0.1", 80)),
        ("http://ex%E3%80%82com/", ("http", "ex.com", 80)),
        ("http://a_b.com/", ("http", "a_b.com", 80)),
        ("http://bücher.de/", ("http", "xn--bcher-kva.de", 80)),
        ("http://1.2.3.4.5/", None),
        ("http://256.1.1.1/", None),
        ("http:///path", None),
        ("mailto:a@b.c", None),
        ("http://a.com:99999/", None),
    ],
)
def test_url_host_reads_like_the_browser(url: str, expected: tuple[str, str, int] | None) -> None:
    assert url_host(url) == expected


def test_allow_list_cannot_be_bypassed_by_url_tricks() -> None:
    policy = NavigationPolicy.build(allowed=["allowed.com", "*.docs.org"], start_url="https://allowed.com/")
    for url in (
        "https://allowed.com/",
        "https://ALLOWED.com./a?b#c",
        "http://allowed.com:8080/",
        "https://docs.org/",
        "https://api.v2.docs.org/",
        "wss://allowed.com/socket",
    ):
        assert policy.check(url, navigation=True) is None, url
    for url in (
        "https://evil.com/",
        "https://allowed.com.evil.com/",
        "https://evil.com/allowed.com",
        "https://evil.com/?u=https://allowed.com/",
        "https://allowed.com@evil.com/",
        "https://evil.com\\@allowed.com/",
        "https://notdocs.org/",
        "https://ev%69l.com/",
        "ws://evil.com/",
    ):
        assert policy.check(url, navigation=True) is not None, url
        assert policy.check(url, navigation=False) is not None, url


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://[::ffff:0:7f00:1]/",
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::7f00:1]/",
        "http://0.0.0.0/",
        "http://[::ffff:0.0.0.0]/",
        "http://2130706433/",
        "http://１２７.０.０.１/",
    ],
)
def test_a_blocked_address_is_blocked_in_every_spelling(url: str) -> None:
    for entry in ("127.0.0.1", "[::ffff:127.0.0.1]", "0.0.0.0"):
        policy = NavigationPolicy.build(blocked=[entry], start_url="https://example.com/", private_network="allow")
        assert "blocked_domains" in (policy.check(url, navigation=True) or ""), (entry, url)
        assert "blocked_domains" in (policy.check(url, navigation=False) or ""), (entry, url)
    allowed = NavigationPolicy.build(allowed=["10.0.0.5"], start_url="https://example.com/")
    assert allowed.check(url, navigation=True) is not None


def test_names_are_matched_in_their_uts46_form() -> None:
    # Chromium's UTS #46 (non-transitional): faß.test is xn--fa-hia.test, not IDNA 2003's fass.test.
    blocked = NavigationPolicy.build(blocked=["faß.test"], start_url="https://example.com/")
    assert blocked.blocked == (HostRule("xn--fa-hia.test"),)
    for url in ("http://faß.test/", "http://FAẞ.TEST/", "http://xn--fa-hia.test/", "http://fa%C3%9F.test/"):
        assert blocked.check(url, navigation=True) is not None, url
    assert blocked.check("http://fass.test/", navigation=True) is None
    other = NavigationPolicy.build(blocked=["fass.test"], start_url="https://example.com/")
    assert other.check("http://faß.test/", navigation=True) is None
    assert other.check("http://fass.test/", navigation=True) is not None
    wide = NavigationPolicy.build(allowed=["ｅｘａｍｐｌｅ．ｃｏｍ"], start_url="https://example.com/")
    assert wide.allowed == (HostRule("example.com"),)
    assert wide.check("https://EXAMPLE.com/", navigation=True) is None


def test_block_list_wins_and_ports_count() -> None:
    policy = NavigationPolicy.build(
        allowed=["*.example.com"], blocked=["ads.example.com", "example.com:8080"], start_url="https://example.com/"
    )
    assert policy.check("https://www.example.com/", navigation=True) is None
    assert "blocked_domains" in (policy.check("https://ads.example.com/x.js", navigation=False) or "")
    assert policy.check("http://example.com:8080/", navigation=True) is not None
    assert policy.check("http://example.com/", navigation=True) is None
    only_block = NavigationPolicy.build(blocked=["*.tracker.net"], start_url="https://news.com/")
    assert only_block.check("https://any.where/", navigation=True) is None
    assert only_block.check("https://cdn.tracker.net/p.gif", navigation=False) is not None


def test_schemes() -> None:
    policy = NavigationPolicy.build(allowed=["allowed.com"], start_url="https://allowed.com/")
    assert policy.check("about:blank", navigation=True) is None
    assert policy.check("about:srcdoc", navigation=True) is None
    assert policy.check("about:blank#x", navigation=True) is None
    assert policy.check("about:settings", navigation=True) is not None
    # data: and blob: are inline content: fine inside a page, never as a page of their own.
    assert policy.check("data:image/png;base64,AAAA", navigation=False) is None
    assert policy.check("data:text/html,<script>x</script>", navigation=True) is not None
    assert policy.check("blob:https://allowed.com/123e4567", navigation=False) is None
    assert policy.check("blob:https://allowed.com/123e4567", navigation=True) is None
    assert policy.check("blob:https://evil.com/123e4567", navigation=True) is not None
    assert policy.check("blob:null/123e4567", navigation=True) is not None
    for url in (
        "javascript:alert(1)",
        "JavaScript:location='https://evil.com'",
        " javascript:void(0)",
        "file:///etc/passwd",
        "filesystem:https://allowed.com/temporary/x",
        "chrome://settings",
        "view-source:https://allowed.com/",
        "ftp://allowed.com/",
        "not a url",
    ):
        assert policy.check(url, navigation=True) is not None, url


def test_nothing_is_checked_without_rules_on_a_local_start() -> None:
    policy = NavigationPolicy.build(start_url="http://127.0.0.1:8000/")
    assert not policy.active
    assert policy.check("http://10.0.0.1/", navigation=True) is None
    assert policy.check("file:///tmp/x.html", navigation=True) is None
    assert policy.check("javascript:1", navigation=True) is None


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fd00::1",
        "::ffff:7f00:1",
        "::ffff:10.0.0.1",
        "2002:a00:1::",
        "224.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "::ffff:0:7f00:1",
        "::7f00:1",
        "::",
        "localhost",
        "api.localhost",
        "printer.local",
        "metadata.google.internal",
        "router.home.arpa",
    ],
)
def test_private_hosts(host: str) -> None:
    assert is_private_host(host)


@pytest.mark.parametrize("host", ["8.8.8.8", "2606:4700::1111", "example.com", "localhost.example.com", "local.com"])
def test_public_hosts(host: str) -> None:
    assert not is_private_host(host)


def test_private_network_default_follows_the_start_url() -> None:
    public = NavigationPolicy.build(start_url="https://example.com/")
    assert public.active and public.block_private and not public.allow_file
    for url in (
        "http://127.0.0.1:8000/",
        "http://localhost/",
        "http://2130706433/",
        "http://0.0.0.0:8000/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:0:7f00:1]/",
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://192.168.0.1/admin",
        "file:///etc/passwd",
    ):
        assert public.check(url, navigation=True) is not None, url
        assert public.check(url, navigation=False) is not None, url
    assert public.check("https://example.org/", navigation=True) is None
    for start in ("http://127.0.0.1:8000/", "http://localhost:3000/", "http://192.168.1.20/", "file:///tmp/a.html"):
        assert not NavigationPolicy.build(start_url=start).block_private, start
    assert not NavigationPolicy.build(start_url="https://example.com/", private_network="allow").active
    strict = NavigationPolicy.build(start_url="http://127.0.0.1:8000/", private_network="block")
    assert strict.check("http://127.0.0.1:8000/", navigation=True) is not None


def test_an_allowed_entry_naming_a_private_host_allows_it() -> None:
    policy = NavigationPolicy.build(allowed=["example.com", "10.0.0.5:8080"], start_url="https://example.com/")
    assert policy.block_private
    assert policy.check("http://10.0.0.5:8080/", navigation=True) is None
    assert policy.check("http://10.0.0.5:9090/", navigation=True) is not None
    assert policy.check("http://10.0.0.6:8080/", navigation=True) is not None


def test_local_hosts_let_one_private_server_through_and_nothing_else_local() -> None:
    # An untrusted local start (a client's, a task file's) vouched for as that one host:port.
    policy = NavigationPolicy.build(
        start_url="http://127.0.0.1:8000/", trust_start=False, local_hosts=["127.0.0.1:8000"]
    )
    assert policy.block_private and not policy.allow_file
    assert policy.check("http://127.0.0.1:8000/page", navigation=True) is None
    assert policy.check("ws://127.0.0.1:8000/socket", navigation=False) is None
    for url in ("http://127.0.0.1:8001/", "http://localhost:8000/", "http://10.0.0.5:8000/", "file:///etc/passwd"):
        assert policy.check(url, navigation=True) is not None, url
    assert policy.check("https://example.com/", navigation=True) is None
    # A blocked entry still wins; an allow-list still applies.
    blocked = NavigationPolicy.build(
        start_url="https://x.example/", blocked=["127.0.0.1"], local_hosts=["127.0.0.1:8000"]
    )
    assert blocked.check("http://127.0.0.1:8000/", navigation=True) is not None
    listed = NavigationPolicy.build(
        start_url="https://x.example/", allowed=["x.example"], local_hosts=["127.0.0.1:8000"]
    )
    assert listed.check("http://127.0.0.1:8000/", navigation=True) is not None
    for entry in ("127.0.0.1", "*.local:80"):
        with pytest.raises(ValueError, match="one host:port"):
            NavigationPolicy.build(start_url="https://x.example/", local_hosts=[entry])


async def test_local_hosts_skip_the_dns_check() -> None:
    async def private(host: str) -> list[str]:
        return ["10.0.0.7"]

    policy = NavigationPolicy.build(
        start_url="https://x.example/", local_hosts=["intranet.test:8080"], resolver=private
    )
    assert await policy.check_resolved("http://intranet.test:8080/", navigation=True) is None
    assert await policy.check_resolved("http://other.test:8080/", navigation=True) is not None


def test_file_urls() -> None:
    assert NavigationPolicy.build(start_url="file:///tmp/a.html", allowed=["example.com"]).allow_file
    assert not NavigationPolicy.build(start_url="http://127.0.0.1/", allowed=["127.0.0.1"]).allow_file
    assert NavigationPolicy.build(start_url="http://127.0.0.1/", blocked=["ads.com"]).allow_file


def test_is_local_url() -> None:
    assert is_local_url("http://127.0.0.1:5000/x") and is_local_url("FILE:///x") and is_local_url("http://[::1]/")
    assert not is_local_url("https://example.com/") and not is_local_url("about:blank")


async def test_dns_answers_are_checked_for_navigations() -> None:
    asked: list[str] = []

    async def resolver(host: str) -> list[str]:
        asked.append(host)
        return {"intranet.example.com": ["10.0.0.7"], "www.example.com": ["93.184.215.14", "fe80::1%eth0"]}.get(
            host, ["93.184.215.14"]
        )

    policy = NavigationPolicy.build(start_url="https://example.com/", resolver=resolver)
    reason = await policy.check_resolved("https://intranet.example.com/", navigation=True)
    assert reason is not None and "resolves to a private" in reason
    assert await policy.check_resolved("https://intranet.example.com/x", navigation=True) is not None
    assert asked == ["intranet.example.com"]  # cached
    assert await policy.check_resolved("https://public.example.com/", navigation=True) is None
    assert await policy.check_resolved("https://www.example.com/", navigation=True) is not None  # any private answer
    # Subresources and IP literals are judged by text alone (no lookup per image).
    assert await policy.check_resolved("https://other.example.com/a.png", navigation=False) is None
    assert await policy.check_resolved("https://93.184.215.14/", navigation=True) is None
    assert "other.example.com" not in asked and "93.184.215.14" not in asked

    async def failing(host: str) -> list[str]:
        raise OSError("no such host")

    unresolvable = NavigationPolicy.build(start_url="https://example.com/", resolver=failing)
    assert await unresolvable.check_resolved("https://nowhere.invalid/", navigation=True) is None
    allowed = NavigationPolicy.build(allowed=["intranet.example.com"], start_url="https://x.com/", resolver=resolver)
    assert await allowed.check_resolved("https://intranet.example.com/", navigation=True) is None


def test_describe() -> None:
    policy = NavigationPolicy.build(allowed=["a.com"], blocked=["b.a.com"], start_url="https://a.com/")
    text = policy.describe()
    assert "a.com" in text and "b.a.com" in text and "private" in text
    assert NavigationPolicy.build(start_url="http://127.0.0.1/").describe() == ""
