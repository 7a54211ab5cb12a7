"""The browser fleet's settings in ``[browser]``: which provider hands out browsers (``provider``),
the static hosts of the ``hosts`` provider (``[[browser.hosts]]``), a plugin's name and options, and
the health probe's rhythm (``webagent.browser.providers``)."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from ._base import Section

__all__ = ["PROVIDERS", "BrowserHost", "ProviderKind"]

ProviderKind = Literal["local", "hosts", "plugin"]
PROVIDERS: tuple[ProviderKind, ...] = ("local", "hosts", "plugin")

_SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class BrowserHost(Section):
    """``[[browser.hosts]]``: one browser host of the ``hosts`` provider."""

    url: str = Field(
        description="The host's endpoint: a Chromium's remote-debugging URL (http://host:port or its ws:// "
        "browser URL) for protocol cdp, a Playwright browser server's ws:// URL for protocol playwright"
    )
    sessions: int = Field(default=20, ge=1, le=10_000, description="Sessions the host takes at once")
    protocol: Literal["cdp", "playwright"] = Field(default="cdp", description="How the host is reached")
    name: str = Field(default="", description="The host's name in summaries and errors (default: host:port)")
    token_secret: str | None = Field(
        default=None,
        description="The name of a [secrets] entry whose value is sent in token_header on every connection",
    )
    token_header: str = Field(default="Authorization", description="The header that carries the token")
    token_prefix: str = Field(default="Bearer ", description="Put before the token in the header")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        v = v.strip()
        parts = urlsplit(v)
        if parts.scheme not in ("ws", "wss", "http", "https") or not parts.hostname:
            raise ValueError(f"must be a ws://, wss://, http:// or https:// URL with a host, got {v!r}")
        try:
            _ = parts.port
        except ValueError:
            raise ValueError(f"has a bad port: {v!r}") from None
        return v

    @field_validator("token_secret")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        if v is not None and not _SECRET_NAME.fullmatch(v):
            raise ValueError(f"must name a secret (letters, digits, _), got {v!r}")
        return v

    @field_validator("token_header")
    @classmethod
    def _header(cls, v: str) -> str:
        if not _HEADER.fullmatch(v):
            raise ValueError(f"is not an HTTP header name: {v!r}")
        return v

    @property
    def label(self) -> str:
        """The host's name: ``name``, else its URL's host:port."""
        if self.name:
            return self.name
        parts = urlsplit(self.url)
        return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
