"""The session settings of ``[browser]``: what each browser context is opened with.

A signed-in state (``storage_state``), the files a run may upload, a proxy, locale, time zone,
user agent, extra headers, HTTP credentials, TLS errors, geolocation and permissions, colour
scheme and device emulation. ``BrowserConfig`` has them all; a batch task, a suite check or an
MCP session may replace any of them for its own context (``ContextSettings.over``). Passwords and
header values may be ``{{NAME}}`` placeholders of ``[secrets]`` (``webagent.browser.context``
substitutes them when the context opens); either way they are redacted from everything a run
writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from ._base import Section

__all__ = ["ContextSettings", "Geolocation", "HTTPCredentials", "ProxySettings"]

ColorScheme = Literal["light", "dark", "no-preference"]


class ProxySettings(Section):
    """A proxy for the context's requests (a string is its ``server``)."""

    server: str = Field(min_length=1, description="http://host:port, https://host:port or socks5://host:port")
    bypass: str | None = Field(default=None, description="Comma-separated hosts not to proxy, e.g. .internal,localhost")
    username: str | None = None
    password: SecretStr | None = Field(default=None, description="The password, or a {{NAME}} of [secrets]")

    @field_validator("server")
    @classmethod
    def _server(cls, v: str) -> str:
        v = v.strip()
        scheme, sep, rest = v.partition("://")
        if not sep or scheme not in ("http", "https", "socks5", "socks4") or not rest:
            raise ValueError(f"proxy server must look like http://host:port or socks5://host:port, got {v!r}")
        if "@" in rest:
            raise ValueError("put the proxy's user name and password in proxy.username and proxy.password, not the URL")
        return v


class HTTPCredentials(Section):
    """HTTP authentication (Basic, Digest, NTLM) answered by the browser (``user:password`` as a string)."""

    username: str = Field(min_length=1)
    password: SecretStr = Field(description="The password, or a {{NAME}} of [secrets]")
    origin: str | None = Field(default=None, description="Send them to this origin only (scheme://host[:port])")


class Geolocation(Section):
    """Where the browser says it is (``"lat,lon"`` or ``"lat,lon,accuracy"`` as a string)."""

    latitude: float = Field(ge=-90, le=90)
    longitude: float = Field(ge=-180, le=180)
    accuracy: float = Field(default=0.0, ge=0)


class ContextSettings(Section):
    """What each browser context of a run is opened with (all optional)."""

    storage_state: Path | None = Field(
        default=None,
        description="A signed-in browser state (cookies, local storage) saved by `webagent auth save`, loaded into "
        "each context; a secret: never copied into run directories, its cookie values redacted",
    )
    upload_dir: Path | None = Field(
        default=None, description="Files the upload_file action may upload: those in this directory (by name)"
    )
    upload_files: list[Path] = Field(
        default_factory=list, description="More files the upload_file action may upload (by name)"
    )
    proxy: ProxySettings | None = Field(default=None, description="A proxy server (a string: its URL)")
    locale: str | None = Field(default=None, description="The browser's locale, e.g. fr-FR (navigator.language)")
    timezone_id: str | None = Field(default=None, description="An IANA time zone, e.g. Europe/Paris")
    user_agent: str | None = Field(default=None, description="The User-Agent the browser sends and reports")
    extra_http_headers: dict[str, str] = Field(
        default_factory=dict, description="Headers sent with every request; values may be {{NAME}} of [secrets]"
    )
    http_credentials: HTTPCredentials | None = Field(default=None, description="HTTP authentication (user:password)")
    ignore_https_errors: bool = Field(default=False, description="Open sites whose TLS certificate is invalid")
    geolocation: Geolocation | None = Field(default=None, description="Where the browser says it is: lat,lon")
    permissions: list[str] = Field(
        default_factory=list, description="Permissions granted to every site, e.g. geolocation, notifications"
    )
    color_scheme: ColorScheme | None = Field(default=None, description="prefers-color-scheme: light, dark")
    device: str | None = Field(
        default=None,
        description='Emulate a device of Playwright\'s registry, e.g. "iPhone 15" (its viewport, user agent, touch); '
        "screenshots stay at one image pixel per CSS pixel",
    )

    def over(self, changes: ContextSettings | None) -> ContextSettings:
        """These settings with what ``changes`` sets replacing them (a task's own)."""
        if changes is None or not changes.model_fields_set:
            return self
        return self.model_copy(update={name: getattr(changes, name) for name in changes.model_fields_set})

    def relative_to(self, base: Path) -> ContextSettings:
        """These settings with their relative file paths taken from ``base`` (a task file's folder)."""
        update: dict[str, Any] = {}
        if self.storage_state is not None and not self.storage_state.is_absolute():
            update["storage_state"] = base / self.storage_state
        if self.upload_dir is not None and not self.upload_dir.is_absolute():
            update["upload_dir"] = base / self.upload_dir
        if any(not p.is_absolute() for p in self.upload_files):
            update["upload_files"] = [p if p.is_absolute() else base / p for p in self.upload_files]
        if not update:
            return self
        changed = self.model_copy(update=update)
        changed.__pydantic_fields_set__ = set(self.model_fields_set)  # still what the task set, no more
        return changed

    @property
    def secret_bearing(self) -> bool:
        """Whether the settings hold something a run must not write down (a state, a password)."""
        return bool(
            self.storage_state
            or (self.proxy is not None and self.proxy.password is not None)
            or self.http_credentials is not None
        )

    @field_validator("proxy", mode="before")
    @classmethod
    def _proxy(cls, v: Any) -> Any:
        return {"server": v} if isinstance(v, str) else v

    @field_validator("http_credentials", mode="before")
    @classmethod
    def _credentials(cls, v: Any) -> Any:
        if isinstance(v, str):
            user, sep, password = v.partition(":")
            if not sep:
                raise ValueError("http_credentials must look like user:password (the password may be {{NAME}})")
            return {"username": user, "password": password}
        return v

    @field_validator("geolocation", mode="before")
    @classmethod
    def _geolocation(cls, v: Any) -> Any:
        if isinstance(v, str):
            parts = [p.strip() for p in v.split(",")]
            if len(parts) not in (2, 3):
                raise ValueError(f"geolocation must look like 48.85,2.35 (latitude,longitude[,accuracy]), got {v!r}")
            try:
                numbers = [float(p) for p in parts]
            except ValueError:
                raise ValueError(f"geolocation must be numbers, got {v!r}") from None
            return dict(zip(("latitude", "longitude", "accuracy"), numbers, strict=False))
        return v

    @field_validator("extra_http_headers", mode="before")
    @classmethod
    def _headers(cls, v: Any) -> Any:
        if isinstance(v, str):  # from the environment: a JSON object, or "Name: value" lines
            text = v.strip()
            if text.startswith("{"):
                return json.loads(text)
            headers: dict[str, str] = {}
            for line in filter(None, (ln.strip() for ln in text.splitlines())):
                name, sep, value = line.partition(":")
                if not sep or not name.strip():
                    raise ValueError(f"a header must look like 'Name: value', got {line[:40]!r}")
                headers[name.strip()] = value.strip()
            return headers
        if isinstance(v, list):  # from flags: ["Name: value", ...]
            return cls._headers("\n".join(str(item) for item in v))
        return v

    @field_validator("extra_http_headers")
    @classmethod
    def _header_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not name or any(c in name for c in " \t\r\n:"):
                raise ValueError(f"header name {name[:40]!r} is not valid")
            if "\n" in value or "\r" in value:
                raise ValueError(f"the value of header {name} has a line break")
        return v

    @field_validator("permissions", "upload_files", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [part for part in v.replace(",", " ").split()]
        return v

    @field_validator("locale")
    @classmethod
    def _locale(cls, v: str | None) -> str | None:
        if v is not None and not all(part.isalnum() for part in v.replace("_", "-").split("-")):
            raise ValueError(f"locale must look like en-US or fr-FR, got {v!r}")
        return v
