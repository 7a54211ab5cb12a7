"""Launching Chromium: system Chromium when present, Playwright's bundled build otherwise."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import structlog
from playwright.async_api import Browser, Playwright
from playwright.async_api import Error as PlaywrightError

from ..config import BrowserConfig
from ..errors import BrowserError

__all__ = ["CHROMIUM_ARGS", "DISABLED_FEATURES", "find_chromium", "launch_browser"]

log = structlog.get_logger("webagent.browser")

SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")

#: Playwright's own --disable-features list (a later --disable-features flag replaces it, so it is
#: repeated here), plus the omnibox WebUI renderers that Debian's headless Chromium starts per
#: context (~49 MiB each).
DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
    "WebUIOmniboxPopup",
    "PreloadTopChromeWebUI",
    "WebUIOmniboxFullPopup",
    "WebUIOmniboxAimPopup",
    "Translate",
)

CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--disable-smooth-scrolling",
    "--disable-features=" + ",".join(DISABLED_FEATURES),
)


def find_chromium(config: BrowserConfig) -> str | None:
    """The Chromium binary to use: configured, else the system's, else None (Playwright's bundled)."""
    if config.executable_path:
        path = Path(config.executable_path)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise BrowserError(
                f"browser.executable_path {config.executable_path} is not an executable file; "
                "fix the path or remove it to use the system or bundled Chromium"
            )
        return str(path)
    for candidate in SYSTEM_CHROMIUM:
        if Path(candidate).is_file():
            return candidate
    found = shutil.which("chromium")
    return found


async def launch_browser(playwright: Playwright, config: BrowserConfig) -> Browser:
    """Launch one Chromium for many sessions (one context each)."""
    executable = find_chromium(config)
    try:
        browser = await playwright.chromium.launch(
            executable_path=executable,
            headless=config.headless,
            args=[*CHROMIUM_ARGS, *config.args],
        )
    except PlaywrightError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BrowserError(
            f"cannot launch Chromium ({executable or 'Playwright bundled'}): {first}; install Debian's "
            "chromium (apt-get install chromium), run `playwright install chromium`, or set browser.executable_path"
        ) from None
    log.debug("browser_launched", executable=executable or "bundled", version=browser.version)
    return browser
