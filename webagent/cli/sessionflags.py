"""The flags of ``[browser]``'s session settings (``webagent.config.ContextSettings``), shared by every
command that runs the agent: a signed-in state, uploads, a proxy, locale, time zone, user agent,
headers, HTTP credentials, TLS errors, geolocation, permissions, colour scheme, device."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import ConfigError

__all__ = ["SESSION_FLAGS", "add_session_options", "session_overrides"]

#: Config key -> the flag that sets it (how the CLI words a ``ConfigError`` about it).
SESSION_FLAGS: dict[str, str] = {
    "browser.storage_state": "--storage-state",
    "browser.upload_dir": "--upload-dir",
    "browser.upload_files": "--upload-file",
    "browser.proxy": "--proxy",
    "browser.locale": "--locale",
    "browser.timezone_id": "--timezone",
    "browser.user_agent": "--user-agent",
    "browser.extra_http_headers": "--header",
    "browser.http_credentials": "--http-credentials",
    "browser.ignore_https_errors": "--ignore-https-errors",
    "browser.geolocation": "--geolocation",
    "browser.permissions": "--permission",
    "browser.color_scheme": "--color-scheme",
    "browser.device": "--device",
}


def add_session_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "browser session (each context opens with these; passwords and header values may be {{NAME}} of a --secret)"
    )
    g.add_argument(
        "--storage-state",
        metavar="FILE",
        help="start signed in: a browser state saved by 'webagent auth save' (a secret: kept out of every record)",
    )
    g.add_argument("--upload-dir", metavar="DIR", help="files the upload_file action may upload (by name)")
    g.add_argument("--upload-file", action="append", metavar="FILE", help="a file upload_file may upload; repeatable")
    g.add_argument(
        "--proxy", metavar="URL", help="proxy server, e.g. http://proxy.corp:3128 or socks5://127.0.0.1:1080"
    )
    g.add_argument("--proxy-bypass", metavar="HOSTS", help="comma-separated hosts not to proxy (with --proxy)")
    g.add_argument("--proxy-username", metavar="USER", help="proxy user name (with --proxy)")
    g.add_argument(
        "--proxy-password",
        metavar="VALUE",
        help="proxy password (with --proxy); give {{NAME}} and the value as WEBAGENT_SECRET_NAME",
    )
    g.add_argument("--locale", metavar="LOCALE", help="browser locale, e.g. fr-FR")
    g.add_argument("--timezone", metavar="TZ", help="IANA time zone, e.g. Europe/Paris")
    g.add_argument("--user-agent", metavar="UA", help="User-Agent the browser sends and reports")
    g.add_argument("--header", action="append", metavar="'NAME: VALUE'", help="extra HTTP header; repeatable")
    g.add_argument(
        "--http-credentials",
        metavar="USER:PASSWORD",
        help="HTTP authentication the browser answers (give the password as {{NAME}} of a secret)",
    )
    g.add_argument("--ignore-https-errors", action="store_true", help="open sites with invalid TLS certificates")
    g.add_argument(
        "--geolocation", metavar="LAT,LON", help="where the browser says it is (grant --permission geolocation)"
    )
    g.add_argument("--permission", action="append", metavar="NAME", help="permission granted to sites; repeatable")
    g.add_argument("--color-scheme", choices=["light", "dark", "no-preference"], help="prefers-color-scheme")
    g.add_argument("--device", metavar="NAME", help="emulate a device of Playwright's registry, e.g. 'iPhone 15'")


def session_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Dotted overrides for ``load_config`` from the session flags (None: not given)."""
    proxy_parts = {
        "bypass": getattr(args, "proxy_bypass", None),
        "username": getattr(args, "proxy_username", None),
        "password": getattr(args, "proxy_password", None),
    }
    proxy: dict[str, Any] | None = None
    if getattr(args, "proxy", None):
        proxy = {"server": args.proxy, **{k: v for k, v in proxy_parts.items() if v is not None}}
    elif any(v is not None for v in proxy_parts.values()):
        raise ConfigError("--proxy-bypass, --proxy-username and --proxy-password need --proxy URL")
    return {
        "browser.storage_state": getattr(args, "storage_state", None),
        "browser.upload_dir": getattr(args, "upload_dir", None),
        "browser.upload_files": getattr(args, "upload_file", None),
        "browser.proxy": proxy,
        "browser.locale": getattr(args, "locale", None),
        "browser.timezone_id": getattr(args, "timezone", None),
        "browser.user_agent": getattr(args, "user_agent", None),
        "browser.extra_http_headers": getattr(args, "header", None),
        "browser.http_credentials": getattr(args, "http_credentials", None),
        "browser.ignore_https_errors": True if getattr(args, "ignore_https_errors", False) else None,
        "browser.geolocation": getattr(args, "geolocation", None),
        "browser.permissions": getattr(args, "permission", None),
        "browser.color_scheme": getattr(args, "color_scheme", None),
        "browser.device": getattr(args, "device", None),
    }
