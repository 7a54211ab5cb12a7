"""Whether a remote browser keeps the navigation guard's hardening: the switches
``launcher.HARDENED_ARGS`` (and the resolver rules of ``blocked_domains``) on its command line, in a
full Chromium, not a headless shell. A browser launched here gets them; one reached over CDP or a
Playwright server is asked (docs/security.md, "Remote browsers and browser hosts")."""

from __future__ import annotations

import contextlib

from playwright.async_api import Browser
from playwright.async_api import Error as PlaywrightError

from ..config import BrowserConfig
from ..errors import BrowserError
from .deadline import within
from .launcher import hardened_args

__all__ = ["hardening_refusal", "missing_flags"]


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


async def hardening_refusal(browser: Browser, config: BrowserConfig) -> str | None:
    """Why ``browser`` (a remote one) cannot promise the guard's hardening, or None when it can: its command
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
