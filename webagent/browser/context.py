"""What a browser context opens with: ``ContextSettings`` as Playwright's ``new_context`` options,
and signed-in states read from and written to their files.

Used by the pool (every pooled context of a run, an MCP session or a WebEnv episode) and by the
pytest plugin (``browser_context_args``), so that a setting means the same wherever it is given.

A storage state is a secret: it is read here and handed to Chromium, never copied into a run
directory, and written only by ``save_storage_state`` (0600). ``state_secrets`` lists its values
(cookies, local storage) for redaction.

A ``{{NAME}}`` in a header value or a password is filled in when the context opens, and goes with
every request to wherever it is sent: a secret with hosts of its own may be used there only when
that is within them (``secret_reach``): a header when ``allowed_domains`` keeps every request within
its hosts, HTTP credentials when their ``origin`` (or ``allowed_domains``) is, a proxy's password
when the proxy is.
"""

from __future__ import annotations

import difflib
import json
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import structlog
from playwright.async_api import BrowserContext
from playwright.async_api import Error as PlaywrightError

from ..config import ContextSettings, Viewport
from ..errors import ConfigError
from ..files.disk import write_atomic
from ..guard.hosts import url_host
from ..guard.secrets import Secrets
from ..inputs import check_nesting, read_text
from .crashes import browser_failure
from .deadline import within

__all__ = [
    "MAX_STATE_BYTES",
    "STATE_SECRET_MIN_CHARS",
    "context_options",
    "load_storage_state",
    "resolve_device",
    "save_storage_state",
    "secret_reach",
    "state_secrets",
]

log = structlog.get_logger("webagent.browser")

#: A storage state file larger than this is refused (a signed-in state is a few KiB to a few MiB).
MAX_STATE_BYTES = 32 * 1024 * 1024
#: Values of a state (cookies, local storage) shorter than this are not redacted: "1", "en", "true"
#: are not credentials, and redacting them would turn every record into noise.
STATE_SECRET_MIN_CHARS = 8
#: Longer values (large local-storage blobs) are not redacted whole: their parts are not credentials either.
STATE_SECRET_MAX_CHARS = 4096
_AUTH_SAVE = "make one with: webagent auth save URL --goal 'sign in ...' --output FILE"


def load_storage_state(path: Path) -> dict[str, Any]:
    """The storage state in ``path`` (Playwright's ``{"cookies": [...], "origins": [...]}``);
    ConfigError naming the file when it cannot be used. Warns when others may read it."""
    text = read_text(path, "storage state file", limit=MAX_STATE_BYTES, error=ConfigError)
    with_others = _readable_by_others(path)
    if with_others:
        log.warning("storage_state_readable_by_others", path=str(path), hint=f"chmod 600 {path}")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise ConfigError(f"storage state file {path} is not JSON; {_AUTH_SAVE}") from None
    check_nesting(data, f"storage state file {path}", error=ConfigError)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("cookies", []), list)
        or not isinstance(data.get("origins", []), list)
    ):
        raise ConfigError(f"storage state file {path} is not a browser state (cookies and origins); {_AUTH_SAVE}")
    return data


def _readable_by_others(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    except OSError:
        return False


async def save_storage_state(context: BrowserContext, path: Path, *, timeout_s: float) -> Path:
    """Write the context's state (cookies, local storage, IndexedDB) to ``path``, readable by its
    owner only (0600), atomically; BrowserError when the browser does not give it (BrowserCrashError
    when the context or browser is gone, BrowserTimeoutError past ``timeout_s``)."""
    try:
        state = await within(context.storage_state(indexed_db=True), timeout_s, "context.storage_state")
    except PlaywrightError as exc:  # CommandTimeout too
        browser = context.browser
        dead = browser is not None and not browser.is_connected()
        raise browser_failure(exc, "cannot read the browser's signed-in state", dead=dead) from None
    write_atomic(path, json.dumps(state, indent=1) + "\n", private=True)
    return path


def state_secrets(state: Mapping[str, Any]) -> list[str]:
    """The values of a storage state worth redacting: its cookies' and local storage's values of
    ``STATE_SECRET_MIN_CHARS`` to ``STATE_SECRET_MAX_CHARS`` characters (IndexedDB is not searched)."""
    values: list[str] = []
    for cookie in state.get("cookies", []):
        if isinstance(cookie, dict) and isinstance(cookie.get("value"), str):
            values.append(cookie["value"])
    for origin in state.get("origins", []):
        for item in origin.get("localStorage", []) if isinstance(origin, dict) else []:
            if isinstance(item, dict) and isinstance(item.get("value"), str):
                values.append(item["value"])
    kept = {v for v in values if STATE_SECRET_MIN_CHARS <= len(v) <= STATE_SECRET_MAX_CHARS and "\n" not in v}
    return sorted(kept)


def resolve_device(name: str, devices: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
    """A device of Playwright's registry by name (any letter case); ConfigError naming close ones."""
    found = devices.get(name) or next((d for n, d in devices.items() if n.lower() == name.lower()), None)
    if found is None:
        close = difflib.get_close_matches(name, list(devices), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(f"browser.device {name!r} is not in Playwright's device registry{hint}")
    return found


def context_options(
    settings: ContextSettings,
    *,
    viewport: Viewport,
    devices: Mapping[str, Mapping[str, Any]] | None = None,
    substitute: Callable[[str], str] = lambda text: text,
    state: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments of Playwright's ``Browser.new_context`` for ``settings``.

    ``devices``: Playwright's registry (needed when ``settings.device`` is set): the device's
    viewport, user agent, mobile and touch flags, the pixel ratio kept at 1 (screenshots are taken
    at CSS pixels). ``substitute`` fills ``{{NAME}}`` placeholders of ``[secrets]`` in passwords
    and header values. ``state``: the storage state already read (else read from its file).
    """
    options: dict[str, Any] = {"viewport": {"width": viewport.width, "height": viewport.height}}
    if settings.device:
        if devices is None:
            raise ConfigError("browser.device needs Playwright's device registry")
        device = resolve_device(settings.device, devices)
        options.update(
            viewport=dict(device["viewport"]),
            user_agent=device["user_agent"],
            is_mobile=bool(device.get("is_mobile")),
            has_touch=bool(device.get("has_touch")),
        )
    options["device_scale_factor"] = 1
    if settings.user_agent:
        options["user_agent"] = settings.user_agent
    if settings.locale:
        options["locale"] = settings.locale
    if settings.timezone_id:
        options["timezone_id"] = settings.timezone_id
    if settings.color_scheme:
        options["color_scheme"] = settings.color_scheme
    if settings.extra_http_headers:
        options["extra_http_headers"] = {k: substitute(v) for k, v in settings.extra_http_headers.items()}
    if settings.ignore_https_errors:
        options["ignore_https_errors"] = True
    if settings.geolocation is not None:
        options["geolocation"] = settings.geolocation.model_dump()
    if settings.permissions:
        options["permissions"] = list(settings.permissions)
    if settings.http_credentials is not None:
        creds = settings.http_credentials
        options["http_credentials"] = {
            "username": creds.username,
            "password": substitute(creds.password.get_secret_value()),
            **({"origin": creds.origin} if creds.origin else {}),
        }
    if settings.proxy is not None:
        proxy = settings.proxy
        options["proxy"] = {
            "server": proxy.server,
            **({"bypass": proxy.bypass} if proxy.bypass else {}),
            **({"username": proxy.username} if proxy.username else {}),
            **({"password": substitute(proxy.password.get_secret_value())} if proxy.password else {}),
        }
    if settings.storage_state is not None:
        options["storage_state"] = dict(state) if state is not None else load_storage_state(settings.storage_state)
    return options


def secret_reach(settings: ContextSettings, secrets: Secrets, allowed: Sequence[str]) -> str | None:
    """Why ``settings`` would send a secret with hosts of its own (``{{NAME}}`` in a header value or
    a password) to a host outside them, or None. ``allowed``: ``[browser] allowed_domains`` (empty:
    the run may reach every host)."""
    every = tuple(allowed) or None
    for name, value in settings.extra_http_headers.items():
        refusal = secrets.reach_refusal(value, every, f"extra_http_headers {name}")
        if refusal is not None:
            return refusal
    creds = settings.http_credentials
    if creds is not None:
        origin = _host_port(creds.origin) if creds.origin else None
        reach = (origin,) if origin is not None else every
        refusal = secrets.reach_refusal(creds.password.get_secret_value(), reach, "http_credentials")
        if refusal is not None:
            return refusal
    proxy = settings.proxy
    if proxy is not None and proxy.password is not None:
        server = _host_port(proxy.server)
        return secrets.reach_refusal(
            proxy.password.get_secret_value(), (server,) if server is not None else None, "the proxy's password"
        )
    return None


def _host_port(url: str) -> str | None:
    """``host:port`` of an origin or a proxy server's URL, as a host rule (None: none can be read)."""
    parsed = url_host(url)
    if parsed is not None:
        host, port = parsed[1], parsed[2]
    else:
        try:
            parts = urlsplit(url)
            host, port = parts.hostname or "", parts.port or 1080
        except ValueError:
            return None
        if not host:
            return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
