"""Reaching a leased browser host (``Lease``) and asking whether it keeps the navigation guard's
hardening: the switches ``launcher.HARDENED_ARGS`` (and the resolver rules of ``blocked_domains``)
on its command line, in a full Chromium, not a headless shell. A host that cannot show it is
refused for guarded sessions (docs/security.md, "Browser hosts")."""

from __future__ import annotations

import contextlib
import json

from playwright.async_api import Browser, Playwright
from playwright.async_api import Error as PlaywrightError

from ...config import BrowserConfig
from ...errors import BrowserError
from ..deadline import within
from ..launcher import FULL_CHROMIUM_CHANNEL, browser_args, hardened_args
from .base import Lease

__all__ = ["connect_lease", "hardening_refusal", "missing_flags"]


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


def missing_flags(required: list[str], command_line: list[str]) -> list[str]:
    """The flags of ``required`` that ``command_line`` lacks; a list flag (``--x=a,b``) is there when
    each of its values is, whichever ``--x=`` flags carry them."""
    values: dict[str, set[str]] = {}
    for arg in command_line:
        name, _, value = arg.partition("=")
        values.setdefault(name, set()).update(v.strip() for v in value.split(",") if v.strip())
    missing = []
    for flag in required:
        name, sep, value = flag.partition("=")
        wanted = {v.strip() for v in value.split(",") if v.strip()}
        if name not in values or (sep and not wanted <= values[name]):
            missing.append(flag)
    return missing


async def hardening_refusal(browser: Browser, config: BrowserConfig, lease: Lease) -> str | None:
    """Why ``lease``'s browser cannot promise the guard's hardening, or None when it can: its command
    line (CDP ``Browser.getBrowserCommandLine``, told only by a Chromium started with
    ``--enable-automation``, as Playwright starts its own) holds every hardened switch, and it is not a
    headless shell (whose content layer ignores the WebRTC switch)."""
    try:
        cdp = await within(browser.new_browser_cdp_session(), config.command_timeout_s, "new_browser_cdp_session")
        try:
            reply = await within(
                cdp.send("Browser.getBrowserCommandLine"), config.command_timeout_s, "Browser.getBrowserCommandLine"
            )
        finally:
            with contextlib.suppress(PlaywrightError, BrowserError):
                await within(cdp.detach(), config.command_timeout_s, "detach")
    except (PlaywrightError, BrowserError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"it does not tell its command line ({first}); start its Chromium with --enable-automation"
    arguments = [str(a) for a in reply.get("arguments", [])]
    program = arguments[0] if arguments else ""
    if "headless-shell" in program or "headless_shell" in program:
        return f"it is a headless shell ({program}), where WebRTC's UDP switch does nothing; run the full Chromium"
    missing = missing_flags(hardened_args(config), arguments)
    if missing:
        return "its Chromium was started without " + " ".join(missing)
    return None
