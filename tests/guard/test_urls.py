"""normalize_url: what the browser can open, and errors that say what is wrong."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webagent.errors import ActionError, InputError, WebAgentError
from webagent.guard.urls import normalize_url

from ..strategies import PROPERTIES


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("example.com", "https://example.com"),
        ("example.com/path?q=1#frag", "https://example.com/path?q=1#frag"),
        ("sub.example.co.uk:8443/a", "https://sub.example.co.uk:8443/a"),
        ("  example.com  ", "https://example.com"),
        ("localhost", "http://localhost"),
        ("localhost:8000/x", "http://localhost:8000/x"),
        ("127.0.0.1", "http://127.0.0.1"),
        ("127.0.0.1:5000/app", "http://127.0.0.1:5000/app"),
        ("https://example.com", "https://example.com"),
        ("http://example.com:80/", "http://example.com:80/"),
        ("HTTPS://Example.com/A", "HTTPS://Example.com/A"),
        ("http://localhost:3000", "http://localhost:3000"),
        ("http://[::1]:8000/", "http://[::1]:8000/"),
        ("file:///tmp/page.html", "file:///tmp/page.html"),
        ("about:blank", "about:blank"),
    ],
)
def test_normalize_url(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


def test_bare_ipv6_loopback_gets_http() -> None:
    # normalize_url treats "[::1]" as local (http://), like localhost and 127.x.
    assert normalize_url("[::1]:8000/x") == "http://[::1]:8000/x"


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("", "no URL given"),
        ("   ", "no URL given"),
        ("not a url", "invalid URL 'not a url'"),
        ("example", "invalid URL 'example'"),
        ("javascript:alert(1)", "invalid URL"),
        ("ftp://files.example.com", "scheme must be http, https or file"),
        ("about:config", "scheme must be http, https or file"),
        ("http://example.com:99999", "port"),
        ("http://example.com:abc", "port"),
        ("example.com:99999", "port"),
        ("http://", "no host name"),
        ("https:///path", "no host name"),
        ("http://example.com[", "invalid URL 'http://example.com[': Invalid IPv6 URL"),
        ("http://[not-an-ip]/", "does not appear to be an IPv4 or IPv6 address"),
        # b"\xff" in a command line, as Python reads it: a lone surrogate
        ("http://example.com/a\udcff", "invalid URL: not valid text at character 21; give it in UTF-8"),
    ],
)
def test_invalid_urls_raise_input_error(url: str, fragment: str) -> None:
    with pytest.raises(InputError) as info:
        normalize_url(url)
    assert fragment in str(info.value)


def test_none_is_treated_as_empty() -> None:
    with pytest.raises(InputError, match="no URL given"):
        normalize_url(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("url", ["", "not a url", "ftp://x.org", "http://x.org:99999", "http://"])
def test_error_class_is_configurable(url: str) -> None:
    with pytest.raises(ActionError) as info:
        normalize_url(url, error=ActionError)
    assert not isinstance(info.value, InputError)
    assert isinstance(info.value, WebAgentError)


# ---------------------------------------------------------------- properties

_URLISH = st.builds(
    lambda scheme, host, port, path: scheme + host + port + path,
    st.sampled_from(["", "http://", "https://", "HTTP://", "file://", "ftp://", "about:", "javascript:", "//"]),
    st.sampled_from(["example.com", "localhost", "127.0.0.1", "[::1]", "a", "", "ex ample.com", "xn--d1a.test"]),
    st.sampled_from(["", ":80", ":65535", ":70000", ":x", ":"]),
    st.text(st.sampled_from("/?#%&= a.é:@[]"), max_size=12),
)


@PROPERTIES
@given(text=_URLISH | st.text(max_size=40))
def test_any_text_is_a_url_or_an_input_error_and_normalising_is_idempotent(text: str) -> None:
    try:
        url = normalize_url(text)
    except InputError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert url == "about:blank" or url.split(":", 1)[0].lower() in ("http", "https", "file")
    assert normalize_url(url) == url
