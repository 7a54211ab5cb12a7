"""Reaching a leased browser host (``Lease``), its headers (a token) sent with the connection."""

from __future__ import annotations

import json

from playwright.async_api import Browser, Playwright
from playwright.async_api import Error as PlaywrightError

from ...config import BrowserConfig
from ...errors import BrowserError
from ..deadline import within
from ..launcher import FULL_CHROMIUM_CHANNEL, browser_args
from .base import Lease

__all__ = ["connect_lease"]


async def connect_lease(playwright: Playwright, config: BrowserConfig, lease: Lease, *, hardened: bool) -> Browser:
    """A connection to ``lease``'s browser, its headers (a token) sent with it. A Playwright server
    launches a browser for the connection with webagent's flags (``hardened``: the guard's too)."""
    timeout_ms = config.navigation_timeout_s * 1000
    seconds = config.open_timeout_s + config.command_timeout_s
    headers = dict(lease.headers)
    try:
        if lease.protocol == "playwright":
            options: dict[str, object] = {
                "headless": config.headless,
                "args": browser_args(config.args, hardened=hardened, blocked=config.blocked_domains),
            }
            if hardened and config.headless:
                options["channel"] = FULL_CHROMIUM_CHANNEL
            headers["x-playwright-launch-options"] = json.dumps(options)
            connecting = playwright.chromium.connect(lease.endpoint, timeout=timeout_ms, headers=headers)
            return await within(connecting, seconds, "chromium.connect")
        connecting = playwright.chromium.connect_over_cdp(lease.endpoint, timeout=timeout_ms, headers=headers)
        return await within(connecting, seconds, "connect_over_cdp")
    except PlaywrightError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BrowserError(f"cannot reach browser host {lease.name}: {first}") from None
