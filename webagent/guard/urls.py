"""URL checks shared by the CLI, the agent and the goto action."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from ..errors import InputError, WebAgentError
from ..inputs import not_utf8_at

__all__ = ["normalize_url"]

_SCHEMES = ("http", "https", "file")
_HOSTLIKE = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d+)?([/?#].*)?$")


def normalize_url(url: str, *, error: type[WebAgentError] = InputError) -> str:
    """Return a URL the browser can open, or raise ``error`` saying what is wrong.

    A bare host (``example.com/path``) gets ``https://``; ``localhost``/``127.0.0.1`` get ``http://``.
    """
    text = (url or "").strip()
    if not text:
        raise error("no URL given: pass the start page, e.g. --url https://example.com")
    if (at := not_utf8_at(text)) is not None:
        raise error(f"invalid URL: not valid text at character {at}; give it in UTF-8")
    if "://" not in text and not text.startswith(("about:", "file:")):
        match = _HOSTLIKE.match(text)
        host = match.group("host").lower() if match else ""
        if not host or ("." not in host and host != "localhost" and not host.startswith("[")):
            raise error(f"invalid URL {text!r}: expected something like https://example.com")
        local = host in ("localhost", "[::1]") or (host.startswith("127.") and host.replace(".", "").isdigit())
        text = ("http://" if local else "https://") + text
    if text == "about:blank":
        return text
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # e.g. a stray "[" (an unclosed IPv6 literal)
        raise error(f"invalid URL {url!r}: {exc}") from None
    if parts.scheme not in _SCHEMES:
        raise error(f"invalid URL {url!r}: the scheme must be http, https or file")
    if parts.scheme != "file" and not parts.hostname:
        raise error(f"invalid URL {url!r}: it has no host name")
    try:
        _ = parts.port
    except ValueError:
        raise error(f"invalid URL {url!r}: the port is not a number between 0 and 65535") from None
    return text
